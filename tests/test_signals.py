"""Adding a signal is one registry entry plus its rule: it then reaches every stage and sink."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest

import kvdoctor
from kvdoctor import terminal
from kvdoctor.notify.blocks import evidence_fields
from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.signals import FINDINGS, SIGNALS, UNITS, Signal, evidence_for
from kvdoctor.sources.client import PromClient
from kvdoctor.sources.prometheus import PrometheusEvaluator
from kvdoctor.status.exposition import make_registry
from kvdoctor.status.state import DaemonState
from kvdoctor.web.app import App

RECORDING = Path(__file__).parent / "fixtures/recordings/vllm-0.10.2-cpu/kv_bound.jsonl.gz"
EXTRA_RULE = """
groups:
  - name: test-extra-signal
    rules:
      - record: kvdoctor:waiting:max1m
        expr: max_over_time(kvdoctor:waiting[1m])
"""
NEW = Signal(
    "waiting_max_1m",
    "Waiting, 1m peak",
    "count",
    "kvdoctor:waiting:max1m",
    short="waiting max 1m",
    metric="kvdoctor_requests_waiting_max_1m",
    help="Peak of waiting requests over 1m.",
    history=True,
    summary=True,
)


@pytest.fixture
def with_new_signal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    monkeypatch.setitem(SIGNALS, NEW.key, NEW)
    extra = tmp_path / "extra.yml"
    extra.write_text(EXTRA_RULE, encoding="utf-8")
    return [*default_rule_files(), extra]


def test_a_new_signal_reaches_evidence_exposition_history_text_slack_page_and_prometheus_source(
    with_new_signal,
):
    pipeline = Pipeline(load_files(with_new_signal))
    cycles = list(replay(pipeline, [RECORDING]))
    (d,) = cycles[-1].diagnoses
    assert d.evidence[NEW.key] >= d.evidence["waiting"]  # the classifier read the new rule's series

    state = DaemonState()
    state.publish(cycles[-1].diagnoses, d.t, 0.1, 0)
    assert NEW.key in state.history(d.target, d.model_name)[-1]  # kept for the page's charts

    metrics = generate_latest(make_registry(state)).decode()
    assert f'kvdoctor_requests_waiting_max_1m{{model_name="{d.model_name}",target="{d.target}"}}' in metrics
    assert "# HELP kvdoctor_requests_waiting_max_1m Peak of waiting requests over 1m." in metrics

    assert "Waiting, 1m peak" in terminal.report(d)  # evidence text of reports and timelines
    assert any(f["text"].startswith("*Waiting, 1m peak*") for f in evidence_fields({NEW.key: 7.0}))

    page = App(state, make_registry(state)).handle("GET", "/api/v1/signals", {})
    signals = {s["key"]: s for s in json.loads(page.body)["data"]["signals"]}
    assert signals[NEW.key]["short"] == "waiting max 1m" and signals[NEW.key]["unit"] == "count"

    source = PrometheusEvaluator(PromClient("http://127.0.0.1:1"), Pipeline(load_files(with_new_signal)))
    assert "kvdoctor:waiting:max1m" in source.queries()["signals"]


def test_every_signal_has_a_known_unit_and_every_finding_names_registered_evidence():
    assert all(s.unit in UNITS for s in SIGNALS.values())
    assert all(k in SIGNALS for f in FINDINGS.values() for k in f.evidence)
    assert evidence_for("kv_cache")[0] == "kv_usage_max_30s" and evidence_for("no_such_finding") == ()
    assert len({s.metric for s in SIGNALS.values() if s.metric}) == len(
        [s for s in SIGNALS.values() if s.metric]
    )


# an evidence key written as a literal: ev["k"], ev.get("k"), x.evidence["k"]…, or a key beside `**…evidence` in a dict
EVIDENCE_KEY = re.compile(r'\b(?:ev|evidence)(?:\.get\(|\[)"([a-z0-9_]+)"')
SPREAD_KEY = re.compile(r'"([a-z0-9_]+)":')


def test_every_evidence_key_the_code_names_is_registered():
    """One home per evidence key: a key read or written anywhere in kvdoctor is an entry of SIGNALS."""
    named: dict[str, str] = {}
    for path in sorted(Path(kvdoctor.__file__).parent.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            keys = EVIDENCE_KEY.findall(line)
            if re.search(r"\{\*\*(?:\w+\.)?(?:ev|evidence),", line):
                keys += SPREAD_KEY.findall(line)
            named.update({k: f"{path.name}:{n}" for k in keys})
    assert len(named) > 30, "the scan found too few keys: is the pattern right?"
    assert not {k: at for k, at in named.items() if k not in SIGNALS}


def test_every_recorded_signal_is_a_rule_of_the_pack():
    rules = {r.name for g in load_files(default_rule_files()) for r in g.rules if r.kind == "record"}
    assert {s.rule for s in SIGNALS.values() if s.rule} <= rules


def test_charted_signals_are_kept_in_history_and_named_for_the_page():
    charted = [s for s in SIGNALS.values() if s.chart]
    assert {s.chart for s in charted} >= {"KV cache usage", "TTFT p95"}
    for s in charted:
        assert s.history, s.key  # the page draws from the kept history
        assert s.chart_style in ("", "fill", "dash"), s.key
        assert not s.chart_line or s.chart_line in SIGNALS, s.key
