"""A corrupt state file is a fresh start, said once: a warning naming the file and the fault, the file moved aside."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from kvdoctor.config import Config
from kvdoctor.daemon import persist
from kvdoctor.pipeline import Pipeline
from kvdoctor.report.history import History
from kvdoctor.rules.loader import default_rule_files, load_files
from tests.support.statefiles import saved_alert

GOOD_ALERT = saved_alert("a")
SHAPES = {
    "list": ([], "expected an object"),
    "null": (None, "null"),
    "number": (5, "int"),
    "no version": ({"alerts": []}, "unknown version"),
    "alerts not a list": ({"version": 1, "alerts": 5}, "alerts is int"),
    "alert not an object": ({"version": 1, "alerts": ["x"]}, "alerts[0] is str"),
    "alert without time": ({"version": 1, "alerts": [{**GOOD_ALERT, "active_at": "soon"}]}, "alerts[0]"),
    "alert labels": ({"version": 1, "alerts": [{**GOOD_ALERT, "labels": {"a": 1}}]}, "alerts[0].labels"),
    "series not a list": ({"version": 1, "series": {}}, "series is dict"),
    "bad series": (
        {"version": 1, "series": [{"labels": [["__name__"]], "points": [[1, 2]]}]},
        "series[0].labels",
    ),
    "bad points": ({"version": 1, "series": [{"labels": [], "points": [[1, "x"]]}]}, "series[0].points"),
    "classifier": ({"version": 1, "classifier": {"since": [[1, 2]]}}, "classifier.since"),
    "history": (
        {
            "version": 1,
            "report_history": {"keys": [{"hours": [{"start": 0, "requests": "many"}], "segments": []}]},
        },
        "requests is not a number",
    ),
}


def _pipeline() -> Pipeline:
    return Pipeline(load_files(default_rule_files()))


@pytest.mark.parametrize("shape", SHAPES)
def test_every_wrong_shape_is_a_fresh_start_with_the_file_moved_aside(shape, daemons, tmp_path, caplog):
    doc, why = SHAPES[shape]
    path = tmp_path / "state.json"
    path.write_text(json.dumps(doc))
    caplog.set_level(logging.WARNING)
    daemon = daemons(Config(targets=[], state_file=str(path)), load_files(default_rule_files()))
    assert daemon.pipeline.rules.active == {} and daemon.history.keys == {}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0] and why in warnings[0] and "starting fresh" in warnings[0]
    aside = list(tmp_path.glob("state.json.corrupt-*"))
    assert len(aside) == 1 and str(aside[0]) in warnings[0]
    assert json.loads(aside[0].read_text()) == doc  # kept as it was, for a post-mortem
    assert not path.exists()
    daemon._persist()  # the fresh start writes a good file in its place
    assert persist.load(path, _pipeline()) is True


@pytest.mark.parametrize("content", [b'{"version": 1, "alerts": [', b"\x00\xff\xfe binary \x89PNG", b""])
def test_truncated_or_binary_state_files_are_ignored_with_a_warning(content, tmp_path, caplog):
    path = tmp_path / "state.json"
    path.write_bytes(content)
    caplog.set_level(logging.WARNING)
    assert persist.load(path, _pipeline(), History()) is False
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(path) in warning and "not JSON" in warning
    assert [p.read_bytes() for p in tmp_path.glob("state.json.corrupt-*")] == [content]


def test_a_good_state_file_is_restored(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 1, "alerts": [GOOD_ALERT], "classifier": {"since": []}}))
    p = _pipeline()
    assert persist.load(path, p) is True
    assert [a.rule for a in p.rules.active.values()] == ["VLLMKVCacheBound"]
    assert path.exists() and not list(tmp_path.glob("*.corrupt-*"))


KILLED_WRITER = """
import sys
from kvdoctor.daemon import persist
from kvdoctor.pipeline import Pipeline
from kvdoctor.report.history import History
from kvdoctor.rules.loader import default_rule_files, load_files
p, h = Pipeline(load_files(default_rule_files())), History()
persist.load(sys.argv[1], p, h)
print("writing", flush=True)
while True:
    persist.save(sys.argv[1], p, h)
"""


@pytest.mark.slow
def test_kill_9_during_state_writes_leaves_a_valid_state_file(tmp_path):
    path = tmp_path / "state.json"
    for _ in range(20):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            pass  # the first write lands within milliseconds; kill it mid-way through a later one
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert persist.load(path, _pipeline(), History()) is True
        assert not list(tmp_path.glob("*.tmp"))  # what a killed write left is removed on the next start
    assert not list(tmp_path.glob("*.corrupt-*"))
