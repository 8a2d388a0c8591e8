"""The step ledger across a restart: a deploy keeps a day of each target's step costs; a wrong ledger part alone goes."""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
import re
import tempfile
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from kvdoctor.config import Config, TargetSpec
from kvdoctor.config.schema import Overrides
from kvdoctor.daemon.durable import LEDGER_EVERY_S
from kvdoctor.daemon.runner import Daemon, load_everything
from kvdoctor.ingest.parse import Parser
from kvdoctor.ingest.recording import load_frames
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.whatif.learn import learn
from kvdoctor.whatif.ledger import MAX_BINS
from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.window import Snap
from tests.support.clock import ManualClock
from tests.support.daemon import Daemons
from tests.support.logs import kvdoctor_said
from tests.support.statefiles import saved_alert

RAMPS = Path(__file__).resolve().parents[1] / "fixtures/recordings/vllm-0.32-cpu-ramps"
HOURS_AGO = 6 * 3600.0
DAY = 24 * 3600.0
ALERT = saved_alert("ramp")


def _ramp() -> tuple[Path, float]:
    """tiny_ramp_c32: its recording and the end of its light step (1-3 requests; its heavy steps ran up to 32)."""
    ramp = next(
        r for r in json.loads((RAMPS / "ramps.json").read_text())["ramps"] if r["name"] == "tiny_ramp_c32"
    )
    return RAMPS / ramp["recording"], ramp["steps"][ramp["light_step"]]["window_unix"][1]


def _feed(daemon: Daemon) -> None:
    """The advisor sees the ramp's busy part 6 h ago, then its light part now, as the daemon's cycles would give it."""
    path, hi = _ramp()
    advisor, parser = daemon.pipeline.advisor, Parser()
    assert advisor is not None
    frames = [f for f in load_frames(path) if f.text is not None]
    for f in [f for f in frames if f.t > hi]:
        advisor.observe("ramp", f.t - HOURS_AGO, parser.parse(f.text).samples)
    for f in [f for f in frames if f.t <= hi]:
        advisor.observe("ramp", f.t, parser.parse(f.text).samples)


def _light() -> tuple[list[Snap], list[Snap]]:
    """The light step as the restarted daemon's history holds it: its last 15 minutes, and the window."""
    path, hi = _ramp()
    light = [s for s in recording_snaps(path) if hi - 900 <= s.t <= hi]
    return light, [s for s in light if s.t >= hi - 120]


def _daemon(
    daemons: Daemons, tmp_path: Path, clock: ManualClock, targets: tuple[str, ...] = ("ramp",)
) -> Daemon:
    specs = [TargetSpec(url=f"http://127.0.0.1:9/{t}/metrics", name=t) for t in targets]
    cfg = Config(targets=specs, state_file=str(tmp_path / "state.json"))
    return daemons(cfg, load_files(default_rule_files()), clock=clock)


@functools.cache
def _saved_ledger() -> tuple[str, float]:
    """The ledger part a daemon fed the ramp writes (JSON text, so each test mutates its own copy), and its now."""
    with tempfile.TemporaryDirectory() as tmp, Daemons() as daemons:
        clock = ManualClock(_ramp()[1])
        d = _daemon(daemons, Path(tmp), clock)
        _feed(d)
        d._persist(force=True)
        doc = json.loads((Path(tmp) / "state.json").read_text())
    return json.dumps(doc["step_ledger"]), clock()


def _ledger_doc() -> dict:
    return json.loads(_saved_ledger()[0])


def test_a_restarted_daemon_predicts_with_the_ledger_it_had(daemons, tmp_path):
    clock = ManualClock(_ramp()[1])
    before = _daemon(daemons, tmp_path, clock)
    _feed(before)
    assert before.pipeline.advisor is not None
    had = before.pipeline.advisor.ledger.recall("ramp")
    assert had is not None and max(x[1] for x, _, _ in had.rows) >= 25  # the busy hour's batches
    before.shutdown()  # a deploy: the last state written at shutdown
    clock.advance(60.0)
    after = _daemon(daemons, tmp_path, clock)
    assert after.pipeline.advisor is not None
    assert after.pipeline.advisor.ledger.recall("ramp") == had  # every bin, to the bit
    light, window = _light()
    after.pipeline.advisor.ledger.add("ramp", light[-1])  # the same engine's next scrape: the day goes on
    assert after.pipeline.advisor.ledger.recall("ramp") == had
    basis = learn(light, window, recall=after.pipeline.advisor.ledger.recall("ramp"))
    said = [n for n in basis.notes if n.startswith("step ledger")]
    hours = re.search(r"from the last (\d+\.\d) h of this target's history", said[0]) if said else None
    assert hours is not None and 6.0 <= float(hours.group(1)) <= 7.0, said
    assert basis.recalled_batch >= 25  # the batches it recalls count as seen, as they did before the restart
    fresh = _daemon(daemons, tmp_path / "elsewhere", clock)  # no state file: what the restart used to give
    assert fresh.pipeline.advisor is not None and fresh.pipeline.advisor.ledger.recall("ramp") is None
    assert not any(n.startswith("step ledger") for n in learn(light, window).notes)


def test_the_ledger_part_is_written_anew_every_five_minutes_and_at_shutdown(daemons, tmp_path):
    clock = ManualClock(_ramp()[1])
    d = _daemon(daemons, tmp_path, clock)

    def saved() -> list[str]:
        d._persist()
        return [
            e["target"] for e in json.loads((tmp_path / "state.json").read_text())["step_ledger"]["targets"]
        ]

    assert saved() == []
    _feed(d)  # the ramp's busy hour leaves the history; the cycles after it write the ledger made before
    clock.advance(LEDGER_EVERY_S - 1)
    assert saved() == []
    clock.advance(1)
    assert saved() == ["ramp"]
    d.pipeline.remove_targets({"ramp"})
    assert saved() == ["ramp"]
    d.shutdown()  # the last write is whole
    assert json.loads((tmp_path / "state.json").read_text())["step_ledger"] == {"targets": []}


def _bins(doc: dict, **change) -> dict:
    b = doc["targets"][0]["bins"]
    for i, v in change.items():
        b[0][int(i[1:])] = v
    return doc


def _mutated(shape: str) -> dict:
    doc, now = _ledger_doc(), _saved_ledger()[1]
    t0 = doc["targets"][0]
    if shape == "not an object":
        return []  # type: ignore[return-value]
    if shape == "targets not a list":
        return {"targets": {"ramp": t0}}
    if shape == "no target name":
        del t0["target"]
    elif shape == "a target twice":
        doc["targets"].append(copy.deepcopy(t0))
    elif shape == "engine not pairs":
        t0["engine"][0] = [t0["engine"][0][0]]
    elif shape == "engine without bytes per token":
        t0["engine"] = t0["engine"][:-1]
    elif shape == "engine with a memory size":
        t0["engine"] = [["engine", "0"], *t0["engine"]]
    elif shape == "engine not a list":
        t0["engine"] = "block_size=16"
    elif shape == "bins not a list":
        t0["bins"] = {}
    elif shape == "too many bins":
        t0["bins"] = [[k, *t0["bins"][0][1:]] for k in range(MAX_BINS + 1)]
    elif shape == "a bin too short":
        t0["bins"][0] = t0["bins"][0][:-1]
    elif shape == "a bin repeated":
        t0["bins"].append(t0["bins"][0])
    elif shape == "a key not an integer":
        _bins(doc, v0=1.5)
    elif shape == "a string":
        _bins(doc, v2="7")
    elif shape == "a huge integer":
        _bins(doc, v4=10**400)
    elif shape == "NaN":
        _bins(doc, v3=math.nan)
    elif shape == "Infinity":
        _bins(doc, v6=math.inf)
    elif shape == "negative":
        _bins(doc, v2=-3.0)
    elif shape == "no weight":
        _bins(doc, v7=0.0)
    elif shape == "in the future":
        _bins(doc, v8=now + 2 * DAY)
    elif shape == "at the epoch":
        _bins(doc, v8=0)
    return doc


SHAPES = {
    "not an object": "step_ledger.targets is not a list",
    "targets not a list": "step_ledger.targets is not a list",
    "no target name": "targets[0] lacks a target name",
    "a target twice": "targets[1] lacks a target name of its own",
    "engine not pairs": "targets[0].engine is not an engine key",
    "engine without bytes per token": "targets[0].engine is not an engine key",
    "engine with a memory size": "targets[0].engine is not an engine key",
    "engine not a list": "targets[0].engine is not an engine key",
    "bins not a list": "targets[0].bins is not a list of at most 96 bins",
    "too many bins": "targets[0].bins is not a list of at most 96 bins",
    "a bin too short": "bins[0] is not a list of a key and 8 numbers",
    "a bin repeated": "repeats a bin",
    "a key not an integer": "bins[0] has no bin key",
    "a string": "bins[0] holds a value that is not a number",
    "a huge integer": "bins[0] holds an integer too large",
    "NaN": "bins[0] holds a NaN, infinite or negative sum",
    "Infinity": "bins[0] holds a NaN, infinite or negative sum",
    "negative": "bins[0] holds a NaN, infinite or negative sum",
    "no weight": "bins[0] has no weight",
    "in the future": "bins[0] was last seen at an impossible time",
    "at the epoch": "bins[0] was last seen at an impossible time",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_wrong_ledger_part_alone_is_dropped_with_one_warning(shape, daemons, tmp_path, caplog):
    path = tmp_path / "state.json"
    doc = {"version": 1, "alerts": [ALERT], "classifier": {"since": []}, "step_ledger": _mutated(shape)}
    path.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes them
    caplog.set_level(logging.WARNING)
    d = _daemon(daemons, tmp_path, ManualClock(_saved_ledger()[1]))
    assert d.pipeline.advisor is not None and d.pipeline.advisor.ledger.held() == {}
    assert [a.rule for a in d.pipeline.rules.active.values()] == ["VLLMKVCacheBound"]  # the rest is restored
    warnings = kvdoctor_said(caplog.records, logging.WARNING)
    assert len(warnings) == 1, warnings
    assert (
        str(path) in warnings[0] and "step ledger is dropped" in warnings[0] and SHAPES[shape] in warnings[0]
    )
    assert path.exists() and not list(tmp_path.glob("*.corrupt-*"))  # not a corrupt file: nothing moved aside


def test_a_state_file_from_before_the_ledger_loads_as_before(daemons, tmp_path, caplog):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 1, "alerts": [ALERT], "classifier": {"since": []}}))
    caplog.set_level(logging.WARNING)
    d = _daemon(daemons, tmp_path, ManualClock(_saved_ledger()[1]))
    assert d.pipeline.advisor is not None and d.pipeline.advisor.ledger.held() == {}
    assert [a.rule for a in d.pipeline.rules.active.values()] == ["VLLMKVCacheBound"]
    assert not kvdoctor_said(caplog.records, logging.WARNING)
    d._persist(force=True)  # and what it writes next holds an empty ledger, read back without a word
    assert json.loads(path.read_text())["step_ledger"] == {"targets": []}


def test_bins_older_than_a_day_at_load_are_dropped_and_the_rest_kept(daemons, tmp_path, caplog):
    ledger, now = _ledger_doc(), _saved_ledger()[1]
    seen = sorted(b[-1] for b in ledger["targets"][0]["bins"])
    # the busy steps ran 6-7 h before the light one: restarted ~18 h later, the earlier of them are over a day old
    later = (seen[0] + seen[-1]) / 2 + DAY
    assert seen[0] < later - DAY < seen[-1] and 17 * 3600 < later - now < 19 * 3600
    assert seen[0] < later - DAY < seen[-1]
    (tmp_path / "state.json").write_text(json.dumps({"version": 1, "step_ledger": ledger}))
    caplog.set_level(logging.WARNING)
    d = _daemon(daemons, tmp_path, ManualClock(later))
    assert d.pipeline.advisor is not None
    held = d.pipeline.advisor.ledger.held()["ramp"]
    assert held.bins == sum(1 for s in seen if s >= later - DAY) and held.oldest_seen >= later - DAY
    assert not kvdoctor_said(caplog.records, logging.WARNING)  # age is no fault


def _metrics(d: Daemon) -> dict[str, float]:
    text = generate_latest(d.registry).decode()
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^(kvdoctor_step_ledger_\w+\{[^}]*\}) (\S+)$", text, re.MULTILINE)
    }


def test_the_ledger_gauges_show_what_it_holds_and_go_with_the_target(daemons, tmp_path):
    ledger, now = _ledger_doc(), _saved_ledger()[1]
    gone = _renamed(ledger["targets"][0], "gone")  # saved before "gone" left the config
    ledger["targets"].append(gone)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"version": 1, "step_ledger": ledger}))
    cfg = tmp_path / "kvdoctor.yml"
    _write_config(cfg, state, ["ramp", "other"])
    clock = ManualClock(now)
    d = daemons(*load_everything(str(cfg), Overrides()), str(cfg), Overrides(), clock=clock)
    d.tick()
    bins = ledger["targets"][0]["bins"]
    assert _metrics(d) == {
        'kvdoctor_step_ledger_bins{target="ramp"}': float(len(bins)),
        'kvdoctor_step_ledger_oldest_timestamp_seconds{target="ramp"}': min(b[-1] for b in bins),
    }  # "other" has no ledger yet, "gone" is not watched
    _write_config(cfg, state, ["other"])
    assert d.reload()[0]
    clock.advance(5.0)
    d.tick()
    assert _metrics(d) == {}
    assert d.pipeline.advisor is not None and "ramp" not in d.pipeline.advisor.ledger.held()


def _renamed(entry: dict, name: str) -> dict:
    return {**copy.deepcopy(entry), "target": name}


def _write_config(path: Path, state: Path, targets: list[str]) -> None:
    specs = ", ".join(f"{{url: 'http://127.0.0.1:9/{t}/metrics', name: {t}}}" for t in targets)
    path.write_text(f"interval: 5s\nstate_file: '{state}'\ntargets: [{specs}]\n")
