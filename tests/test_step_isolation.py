"""A per-target step that fails (classify, advise, what-if) costs that target its step, never the others' cycle.

Before: `num_requests_running -5` was evidence of a healthy server, and the what-if thread crashed on it (a complex
number from a negative value), ending predictions for every target.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.diagnosis import advise, classify
from kvdoctor.ingest.parse import Parser
from kvdoctor.pipeline import Cycle, Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.verdicts import Advice, Diagnosis
from kvdoctor.whatif import advisor as advisor_module
from kvdoctor.whatif.advisor import Advisor
from tests.notify_support.recordings import read_frames, write


def negative(shared_032: Path, out: Path) -> Path:
    """batch_cap.jsonl.gz with every running and waiting gauge negative, as a broken exporter sends them."""
    frames = read_frames(shared_032 / "batch_cap.jsonl.gz")
    for f in frames:
        if f.get("text"):
            f["text"] = re.sub(
                r"^(vllm:num_requests_(?:running|waiting)\{[^}]*\}) \S+$", r"\1 -5", f["text"], flags=re.M
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    write(frames, out)
    return out


def _by_target(cycles: list[Cycle]) -> dict[str, list[Diagnosis]]:
    out: dict[str, list[Diagnosis]] = {}
    for c in cycles:
        for d in c.diagnoses:
            out.setdefault(d.target, []).append(d)
    return out


def test_negative_gauges_are_no_evidence_and_never_reach_the_whatif(shared_032: Path, tmp_path: Path) -> None:
    bad = negative(shared_032, tmp_path / "bad.jsonl.gz")
    pipeline = Pipeline(load_files(default_rule_files()), advisor=Advisor())
    cycles = list(replay(pipeline, [bad, shared_032 / "batch_cap.jsonl.gz"], 15.0))
    by = _by_target(cycles)
    assert "batch_cap" in {d.verdict for d in by["batch_cap"]}  # the healthy recording diagnosed as before
    assert not {"healthy", "batch_cap", "kv_cache", "compute"} & {d.verdict for d in by["bad"]}
    assert all("running" not in d.evidence and "waiting" not in d.evidence for d in by["bad"])
    target = pipeline.targets["bad"]
    assert "`vllm:num_requests_running` = -5 (negative) ignored" in target.invalid_notes()
    sent = sum(
        1
        for f in read_frames(bad)
        if re.search(r"^vllm:num_requests_running\{.*\} -5$", f.get("text") or "", re.M)
    )
    assert 0 < target.invalid_values_total["vllm:num_requests_running"] <= sent  # per scrape that had it
    assert target.step_failures_total == {} and pipeline.targets["batch_cap"].step_failures_total == {}


def test_a_raising_simulation_fails_its_target_alone(
    shared_032: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fault injection: the simulation raises for one target's history, as it did on negative gauges (a complex
    # number) before the scrape check; the what-if thread runs the same guarded computation
    bad_path, good_path = shared_032 / "kv_bound.jsonl.gz", shared_032 / "batch_cap.jsonl.gz"
    bad_t0 = read_frames(bad_path)[0]["t"]
    real = advisor_module.predict

    def broken_for_one(history, window, change, **how):  # type: ignore[no-untyped-def]
        if history[0].t == bad_t0:
            raise TypeError("'>' not supported between instances of 'complex' and 'float'")
        return real(history, window, change, **how)  # the configured cap, when the diagnosis carries one

    monkeypatch.setattr(advisor_module, "predict", broken_for_one)
    advisor = Advisor()
    parser = Parser()
    for name, path in (("bad", bad_path), ("good", good_path)):
        for f in read_frames(path):
            if f.get("text"):
                advisor.observe(name, f["t"], parser.parse(f["text"]).samples)
    change = Advice("--max-num-seqs", "raise it", change={"max_num_seqs": 16})
    diagnoses = [
        Diagnosis(n, "m", read_frames(p)[-1]["t"], "batch_cap", 0.0, advice=[change])
        for n, p in (("bad", bad_path), ("good", good_path))
    ]
    for d in diagnoses:
        advisor.annotate([d], d.t)  # raised out of the simulation before
    assert set(advisor.failures()) == {"bad"} and "TypeError" in advisor.failures()["bad"]
    assert diagnoses[1].advice[0].effect is not None and diagnoses[0].advice[0].effect is None


def test_a_failing_advice_or_classification_fails_that_target_alone(
    shared_032: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # fault injection: the KV advice raises for every KV-bound target, the classification raises for one target
    def broken_kv_cache(*args: object, **kwargs: object) -> list[Advice]:
        raise ZeroDivisionError("float division by zero")

    real = classify._python_findings

    def broken_for_one(target, model, ev):  # type: ignore[no-untyped-def]
        if target.name == "compute_bound":
            raise OverflowError("cannot convert float infinity to integer")
        return real(target, model, ev)

    monkeypatch.setattr(advise, "kv_cache", broken_kv_cache)
    monkeypatch.setattr(classify, "_python_findings", broken_for_one)
    caplog.set_level(logging.INFO, logger="kvdoctor")
    pipeline = Pipeline(load_files(default_rule_files()))
    names = ("kv_bound", "batch_cap", "compute_bound")
    cycles = list(replay(pipeline, [shared_032 / f"{n}.jsonl.gz" for n in names], 15.0))
    by = _by_target(cycles)
    kv = [d for d in by["kv_bound"] if d.verdict == "kv_cache"]
    assert kv and all(not d.advice for d in kv)  # diagnosed, without the advice that failed
    assert any(d.verdict == "batch_cap" and d.advice for d in by["batch_cap"])  # the others untouched
    assert {d.verdict for d in by["compute_bound"]} == {"unknown"}  # no verdict it could not reach
    kv_target, compute = pipeline.targets["kv_bound"], pipeline.targets["compute_bound"]
    assert kv_target.step_failures_total["advise"] >= len(kv)  # every cycle its KV finding held
    assert compute.step_failures_total["classify"] == len(by["compute_bound"])  # each cycle it was in
    assert "OverflowError" in compute.step_errors["classify"]
    assert pipeline.targets["batch_cap"].step_failures_total == {}
    said = [r.getMessage() for r in caplog.records if "compute_bound: classify failed" in r.getMessage()]
    assert said == [
        "target compute_bound: classify failed: OverflowError: cannot convert float infinity to integer"
    ]


def test_an_absurd_rate_is_dropped_from_the_evidence_and_named(shared_032: Path, tmp_path: Path) -> None:
    # a token counter a billion times too fast: its rate is no throughput any server has, its values (~1e13) still
    # ones a counter can hold (above sanity.RAW_MAX the raw sample itself is refused, test below)
    frames = read_frames(shared_032 / "batch_cap.jsonl.gz")
    for f in frames:
        if f.get("text"):
            f["text"] = re.sub(
                r"^(vllm:generation_tokens_total\{[^}]*\}) (\S+)$",
                lambda m: f"{m.group(1)} {float(m.group(2)) * 1e9}",
                f["text"],
                flags=re.M,
            )
    write(frames, tmp_path / "fast.jsonl.gz")
    pipeline = Pipeline(load_files(default_rule_files()))
    cycles = list(replay(pipeline, [tmp_path / "fast.jsonl.gz"], 15.0))
    assert all("generation_tokens_per_s" not in d.evidence for c in cycles for d in c.diagnoses)
    notes = pipeline.targets["fast"].invalid_notes()
    assert any(
        re.fullmatch(r"`kvdoctor:generation_tokens:rate1m` = \S+e\+1\d \(absurd\) ignored", n) for n in notes
    ), notes
    assert (
        pipeline.targets["fast"].invalid_values_total["kvdoctor:generation_tokens:rate1m"] >= len(cycles) - 2
    )


def test_the_whatif_on_a_recording_of_negative_gauges_does_not_crash(
    shared_032: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = negative(shared_032, tmp_path / "bad.jsonl.gz")
    rc = main(["whatif", str(bad), "--set", "max_num_seqs=16"])
    out = capsys.readouterr()
    assert rc in (0, 2) and "Traceback" not in out.err and "complex" not in out.err + out.out, out.err[-2000:]


@pytest.mark.parametrize("command", ["whatif", "plan", "report"])
def test_values_past_any_counter_are_refused_and_no_command_overflows(
    command: str, shared_032: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a fuzzed recording: a few samples at 1e308 summed to +Inf (report: "cannot convert float infinity to
    # integer"; whatif and plan: "intermediate overflow in fsum"), tracebacks where a clear answer belongs
    frames = read_frames(shared_032 / "batch_cap.jsonl.gz")
    for i, f in enumerate(frames):
        if f.get("text") and i % 7 == 3:
            f["text"] = re.sub(
                r"^((?:vllm:request_success_total|vllm:e2e_request_latency_seconds_sum)\{[^}]*\}) (\S+)$",
                lambda m: f"{m.group(1)} 1e308",
                f["text"],
                flags=re.M,
            )
    bad = tmp_path / "huge.jsonl.gz"
    write(frames, bad)
    pipeline = Pipeline(load_files(default_rule_files()))
    notes = [n for c in replay(pipeline, [bad], 15.0) for n in pipeline.targets["huge"].invalid_notes()]
    assert "`vllm:request_success_total` = 1e+308 (absurd) ignored" in notes
    extra = {"whatif": ["--set", "max_num_seqs=16"], "plan": ["--slo", "ttft_p95=2s"], "report": []}[command]
    rc = main([command, str(bad), *extra])
    out = capsys.readouterr()
    assert rc in (0, 1, 2) and "Traceback" not in out.err and "Overflow" not in out.err, out.err[-2000:]
    if command == "report":
        assert rc == 0 and "inf" not in out.out.lower().replace("info", "")
