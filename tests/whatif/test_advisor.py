"""Predicted effects next to the advice, and the follow-up after a restart with a changed flag."""

from __future__ import annotations

import functools
import re
import time
from pathlib import Path

import pytest
import requests

from kvdoctor import terminal
from kvdoctor.ingest.parse import Parser
from kvdoctor.ingest.recording import load_frames
from kvdoctor.pipeline import Cycle, Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.status.exposition import make_registry
from kvdoctor.status.state import DaemonState
from kvdoctor.verdicts import Advice, Diagnosis, Effect
from kvdoctor.web import WebServer
from kvdoctor.whatif import followup
from kvdoctor.whatif.advisor import Advisor
from tests.support.chromium import CHROMIUM, chromium
from tests.support.wait import until

PAIRS = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif"


# One worker runs this module (pytest-xdist --dist loadfile, scripts/test.sh), so each replay is simulated once.


@functools.cache
def _replay(path: Path) -> list[Cycle]:
    """A replay with a sync-mode Advisor: its simulations are most of this module's time, so tests share it."""
    pipeline = Pipeline(load_files(default_rule_files()), advisor=Advisor())
    return list(replay(pipeline, [path], 15.0))


def _advice(cycles: list[Cycle], flag: str):
    return [
        a for c in cycles for d in c.diagnoses for a in d.advice if a.flag == flag and a.effect is not None
    ]


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
def test_batch_cap_advice_carries_its_predicted_effect(shared_032):
    cycles = _replay(shared_032 / "batch_cap.jsonl.gz")
    advice = _advice(cycles, "--max-num-seqs")
    assert advice, "no --max-num-seqs advice with a predicted effect"
    e = advice[-1].effect
    assert e is not None and set(e.change) == {"max_num_seqs"} and int(e.change["max_num_seqs"]) > 4
    assert e.after["ttft_p95_s"] < 0.7 * e.now["ttft_p95_s"]  # the queue drains
    assert e.after["generation_tokens_per_s"] > e.now["generation_tokens_per_s"]
    assert "TTFT p95" in e.text and "→ ≈" in e.text
    d = next(d for c in cycles for d in c.diagnoses if d.bottleneck == "batch_cap" and d.advice[0].effect)
    assert "predicted: TTFT p95" in terminal.report(d)


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
def test_kv_bound_fp8_advice_predicts_fewer_preemptions_and_shorter_ttft(shared_032):
    cycles = _replay(shared_032 / "kv_bound.jsonl.gz")
    advice = _advice(cycles, "--kv-cache-dtype")
    assert advice
    e = advice[-1].effect
    assert e is not None and e.change == {"kv_cache_dtype": "fp8"}
    assert e.after["ttft_p95_s"] < e.now["ttft_p95_s"]
    assert e.after["generation_tokens_per_s"] > e.now["generation_tokens_per_s"]


def test_background_mode_never_makes_an_evaluation_wait(shared_032):
    advisor = Advisor(background=True)
    pipeline = Pipeline(load_files(default_rule_files()), advisor=advisor)
    cycles = list(replay(pipeline, [shared_032 / "batch_cap.jsonl.gz"], 15.0))
    first = [a for d in cycles[-1].diagnoses for a in d.advice if a.change]
    assert first  # the advice is there at once; its effect arrives when the worker is done

    def effects() -> list[object]:
        diags = advisor.annotate(pipeline.evaluate(cycles[-1].t).diagnoses, cycles[-1].t)
        return [a.effect for d in diags for a in d.advice if a.effect]

    until(effects, timeout=20, step=0.2, what="the background worker's predicted effect")


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
def test_restart_with_a_changed_flag_is_compared_with_its_prediction():
    cycles = _replay(PAIRS / "batchcap_restart.jsonl.gz")
    checks = [f for d in cycles[-1].diagnoses for f in d.findings if f.name == "prediction_check"]
    assert len(checks) == 1
    f = checks[0]
    assert (
        f.evidence["change"] == "max_num_seqs 12"
    )  # the new plateau, read from the metrics after the restart
    for q in ("ttft_p50_s", "itl_p50_s", "generation_tokens_per_s"):
        assert 0 <= float(f.evidence[f"prediction_error_{q}"]) < 0.3, q
    assert "TTFT p50 predicted" in f.summary and "measured" in f.summary
    # none before the restart had settled
    assert not [
        f for c in cycles[:4] for d in c.diagnoses for f in d.findings if f.name == "prediction_check"
    ]

    state = DaemonState()
    state.publish(cycles[-1].diagnoses, cycles[-1].t, 0.01, 0)
    server = WebServer(state, make_registry(state), listen="127.0.0.1:0")
    server.start()
    try:
        metrics = requests.get(server.url + "metrics", timeout=5).text
        api = requests.get(server.url + "api/v1/diagnoses", timeout=5).json()
    finally:
        server.stop()
    line = next(
        x
        for x in metrics.splitlines()
        if x.startswith("kvdoctor_prediction_error_ratio{") and 'quantity="ttft_p50_s"' in x
    )
    assert 'target="batchcap_restart"' in line and float(line.rsplit(" ", 1)[1]) < 0.3
    body = str(api)
    assert "prediction_check" in body and "'effect'" in body


@pytest.mark.parametrize("name", ["healthy"])
def test_no_limit_no_prediction(shared_032, name):
    cycles = _replay(shared_032 / f"{name}.jsonl.gz")
    assert not [a for c in cycles for d in c.diagnoses for a in d.advice if a.effect]


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
@pytest.mark.integration
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_status_page_shows_predictions_and_the_follow_up(shared_032, tmp_path):
    capped = _replay(shared_032 / "batch_cap.jsonl.gz")[-1]
    restarted = _replay(PAIRS / "batchcap_restart.jsonl.gz")[-1]
    state = DaemonState()
    state.publish([*capped.diagnoses, *restarted.diagnoses], time.time(), 0.01, 0)
    server = WebServer(state, make_registry(state), listen="127.0.0.1:0")
    server.start()
    try:
        run = chromium(tmp_path, "--dump-dom", server.url)
    finally:
        server.stop()
    assert run.returncode == 0, run.stderr[-2000:]
    text = re.sub(r"\s+", " ", run.stdout)
    assert "predicted: TTFT p95" in text and "ranges are 80 % intervals" in text
    assert "after the restart with max_num_seqs 12: TTFT p50 predicted" in text
    assert re.search(r"TTFT p50 predicted [^;]+ \(80 %: [^)]+\), measured [^;]+, (inside|outside)", text)


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
def test_a_restart_with_the_same_flags_is_not_called_a_change():
    field = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-field/kv_restart.jsonl.gz"
    if not field.exists():
        pytest.skip("field fixture not present")
    cycles = _replay(field)
    assert not [f for c in cycles for d in c.diagnoses for f in d.findings if f.name == "prediction_check"]


RAMP_C8 = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-ramps/tiny_ramp_c8.jsonl.gz"
LIGHT_END = 1796157306.94  # the end of tiny_ramp_c8's light step (ramps.json): ~3 running of --max-num-seqs 8


def _load_x3_effect(evidence: dict[str, float | str]) -> Effect | None:
    """The advisor's predicted effect of three times the light step's load, its diagnosis carrying `evidence`."""
    advisor, parser = Advisor(), Parser()
    for f in load_frames(RAMP_C8):
        if f.text is not None and f.t <= LIGHT_END:
            advisor.observe("ramp", f.t, parser.parse(f.text).samples)
    advice = Advice("load", "three times the load", "test", {"load": 3.0})
    d = Diagnosis("ramp", "tiny", LIGHT_END, "healthy", LIGHT_END - 60, evidence=evidence, advice=[advice])
    return advisor.annotate([d], LIGHT_END)[0].advice[0].effect


def test_the_operators_configured_cap_is_what_the_advisor_simulates():
    # vLLM does not export --max-num-seqs, and the light step never reaches the cap: without the config's cap the
    # advisor assumes vLLM's default 128 and sees load x3 served (as tiny_ramp_c32 would be); the server, capped
    # at 8, queued at that load (ramps.json: 3 req/s step, 7.8 running, 9.5 waiting, 1.85 req/s served)
    assumed, configured = _load_x3_effect({}), _load_x3_effect({"batch_cap_configured": 8.0})
    assert assumed is not None and configured is not None
    assert not assumed.overload
    assert configured.overload.startswith("after overloaded")
    assert configured.after["requests_per_s"] < 0.85 * assumed.after["requests_per_s"]


COBIND = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-cobinding/llama_cobind_c32.jsonl.gz"
COBIND_HELD = (
    1796169326.38,
    1796169514.17,
)  # its labels.json: the cap reached past capacity, compute co-binding


class _AtTheEnd(Advisor):
    """The sync advisor, which keeps every scrape but is first asked at `at`."""

    def __init__(self, at: float, **kwargs: bool) -> None:
        super().__init__(**kwargs)
        self.at = at

    def annotate(self, diagnoses: list[Diagnosis], t: float) -> list[Diagnosis]:
        return super().annotate(diagnoses, t) if t >= self.at else diagnoses


def _held_window_end(advisor: Advisor) -> Diagnosis:
    pipeline = Pipeline(load_files(default_rule_files()), advisor=advisor)
    last = None
    for c in replay(pipeline, [COBIND], 5.0):
        if c.t > COBIND_HELD[1] + 0.5:
            break
        last = next((d for d in c.diagnoses if d.model_name), last)
    assert last is not None
    return last


@pytest.mark.slow  # two replays with the relief check's simulations
def test_the_reports_advisor_names_the_same_limit_from_the_relief_check_alone():
    # the report's books read verdicts, never the advice's effects: it asks only the reliefs, without intervals;
    # asked through the held window, as a replay asks every cycle (the queue's end is judged on the stretch it held)
    at = COBIND_HELD[0]
    full = _held_window_end(_AtTheEnd(at))
    books = _held_window_end(_AtTheEnd(at, books_only=True))
    assert books.verdict == full.verdict == "compute"  # the cap is co-binding: a replica is what relieves it
    check = [next(f for f in d.findings if f.name == "relief_check") for d in (full, books)]
    assert check[0].evidence == check[1].evidence and check[0].summary == check[1].summary
    relieving = books.advice[0]  # the relief that helps leads the advice, with what it buys
    assert relieving.change == {"replicas": 2} and relieving.effect is not None
    assert relieving.effect.after == full.advice[0].effect.after  # the same point prediction
    assert relieving.effect.after_p10 == {} and full.advice[0].effect.after_p10  # no interval asked
    assert all(
        a.effect is None for a in books.advice[1:]
    )  # the rule's own advice is not simulated for the books
    assert any(a.effect is not None for a in full.advice[1:])


class _CountingOffload:
    """Stands for the simulation child: records what it is sent, simulates nothing."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, float]] = []
        self.t = 0.0

    def run(self, fn, *args):
        self.sent.append((getattr(fn, "__name__", str(fn)), self.t))
        return None


def _follow_ups_sent(paths: list[Path]) -> tuple[list[tuple[str, float]], list[float]]:
    """What the advisor sends the child while a target replays these recordings end to end (each a new engine),
    at 1 s cycles; and when it saw each restart (seconds from the start)."""
    offload, parser = _CountingOffload(), Parser()
    advisor = Advisor(offload=offload)  # type: ignore[arg-type]
    t, restarts = 0.0, []
    for path in paths:
        frames = [f for f in load_frames(path) if f.text is not None]
        for f in frames:
            t += 1.0
            offload.t = t
            advisor.observe("x", t, parser.parse(f.text).samples)
            if advisor._restarts.get("x") == t:
                restarts.append(t)
            advisor.annotate([Diagnosis("x", "m", t, "healthy", 0.0)], t)
    return offload.sent, restarts


def test_a_restart_with_the_same_configuration_sends_the_child_nothing(shared_032):
    # a replayed recording's loop: counters back to zero, the same flags; nothing changed, so nothing to check
    sent, restarts = _follow_ups_sent([shared_032 / "compute_bound.jsonl.gz"] * 2)
    assert restarts and sent == []


def test_a_restart_with_a_changed_flag_is_sent_to_the_child_once_settled():
    sent, restarts = _follow_ups_sent([PAIRS / "batchcap_restart.jsonl.gz"])
    assert restarts and sent
    assert {name for name, _ in sent} == {"follow_up"}
    assert sent[0][1] >= restarts[-1] + followup.RAMP_S + followup.SETTLE_S
