"""One evaluation per cycle for the whole fleet: shared subexpressions once, selectors through the name index."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import promql_parser as pp
import pytest

from kvdoctor.ingest.recording import load_frames
from kvdoctor.pipeline import Pipeline
from kvdoctor.promql.engine import Evaluator
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.samples import Sample
from kvdoctor.store import Series, Store

RECORDING = Path(__file__).resolve().parents[1] / "kvdoctor" / "demo" / "kv_bound.jsonl.gz"


def fleet_cycle(n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], list[str], Pipeline]:
    """n copies of a real recording's first minute; the subexpressions one cycle computes, and its diagnoses."""
    frames = [f for f in load_frames(RECORDING) if f.text is not None][:16]
    pipeline = Pipeline(load_files(default_rule_files()))
    for i in range(n):
        pipeline.add_target(f"vllm-{i}:8000")
    for f in frames:
        for i in range(n):
            pipeline.observe(f"vllm-{i}:8000", f.t, f.text)
    computed: Counter[str] = Counter()
    compute = Evaluator._compute

    def counting(self: Evaluator, node: object, t: int) -> object:
        if not isinstance(node, pp.NumberLiteral | pp.StringLiteral):
            computed[str(node)] += 1
        return compute(self, node, t)

    monkeypatch.setattr(Evaluator, "_compute", counting)
    cycle = pipeline.evaluate(frames[-1].t + 1)
    monkeypatch.undo()
    return computed, [d.bottleneck for d in cycle.diagnoses], pipeline


def test_shared_subexpressions_are_computed_once_per_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    computed, classes, _ = fleet_cycle(6, monkeypatch)
    assert classes == ["kv_cache"] * 6  # the recording's verdict, for every copy
    # p50 and p95 read the same ITL buckets' rate, p50 and p99 the same prompt-length ones: each summed once (the
    # sum reads the rate of each series straight from the store, so the rate alone is never an intermediate)
    by = "sum by (job, instance, model_name, le)"
    assert computed[f"{by}(rate(vllm:inter_token_latency_seconds_bucket{{}}[1m]))"] == 1
    assert computed[f"{by}(rate(vllm:request_prompt_tokens_bucket{{}}[5m]))"] == 1
    assert computed["rate(vllm:request_prompt_tokens_bucket{}[5m])"] == 0
    assert computed["kvdoctor:preemptions:rate1m{} > 0"] == 1  # the `unless … > 0` several alerts share
    # the pack reads every recorded series only after the rule that writes it, so nothing needs recomputing
    assert {text: k for text, k in computed.items() if k > 1} == {}
    assert len(computed) > 100


def test_work_per_cycle_does_not_grow_with_the_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    small, _, _ = fleet_cycle(2, monkeypatch)
    large, classes, _ = fleet_cycle(9, monkeypatch)
    assert classes == ["kv_cache"] * 9
    assert large == small  # the same expressions, each once per cycle, whatever the number of targets


def test_a_selector_reads_only_its_own_metrics_series(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store()
    for t in range(3):
        other = [Sample("other_total", (("i", str(k)),), float(t)) for k in range(500)]
        store.ingest("a", 1_000 * (t + 1), [Sample("wanted", (("i", "0"),), 1.0), *other])
    touched: list[str] = []
    at = Series.at

    def counting(self: Series, t: int, lookback_ms: int = 300_000) -> float | None:
        touched.append(self.name)
        return at(self, t, lookback_ms)

    monkeypatch.setattr(Series, "at", counting)
    engine = Evaluator(store)
    assert engine.instant(pp.parse('wanted{i="0"}'), 3_000) == [((("__name__", "wanted"), ("i", "0")), 1.0)]
    assert touched == ["wanted"]


def test_a_shared_result_is_recomputed_once_a_rule_rewrites_what_it_read(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(
        "groups:\n  - name: g\n    rules:\n"
        "      - {record: before, expr: 'count(m) or vector(0)'}\n"
        "      - {record: m, expr: 'vector(5)'}\n"
        "      - {record: after, expr: '(count(m) or vector(0)) + 0'}\n"
    )
    pipeline = Pipeline(load_files([rules]))
    pipeline.evaluate(100.0)
    got = {s.name: s.at(100_000) for s in pipeline.store.select(None) if s.name in ("before", "after")}
    assert got == {"before": 0.0, "after": 1.0}


def test_expressions_that_print_alike_are_not_shared() -> None:
    store = Store()
    store.ingest(
        "t", 1_000, [Sample("x", (("a", "p"), ("b", "q")), 1.0), Sample("x", (("a", 'p",b="q'),), 2.0)]
    )
    one, other = pp.parse('x{a="p",b="q"}'), pp.parse(r'x{a="p\",b=\"q"}')
    assert str(one) == str(other)  # promql-parser prints label values unescaped
    engine = Evaluator(store)
    with engine.shared():
        assert [e.v for e in engine.instant(one, 1_000)] == [1.0]
        assert [e.v for e in engine.instant(other, 1_000)] == [2.0]


def test_the_store_keeps_only_the_families_a_rule_reads(tmp_path: Path) -> None:
    page = "vllm:num_requests_running 3\nhttp_requests_total 9\nprocess_open_fds 12\n"
    rules = tmp_path / "rules.yml"
    rules.write_text(
        "groups:\n  - name: g\n    rules:\n      - {record: busy, expr: 'vllm:num_requests_running > 0'}\n"
    )
    pipeline = Pipeline(load_files([rules]))
    pipeline.observe("a:8000", 10.0, page)
    pipeline.evaluate(10.0)
    assert {s.name for s in pipeline.store.select(None)} >= {"vllm:num_requests_running", "busy", "up"}
    assert not list(pipeline.store.select("http_requests_total"))  # as a Prometheus relabelled to drop it
    assert pipeline.targets["a:8000"].samples == 3  # the scrape's size counts what was dropped
    pipeline.also_store({"http_requests_total"})  # something besides the rules reads it
    pipeline.observe("a:8000", 20.0, page)
    assert [s.at(20_000) for s in pipeline.store.select("http_requests_total")] == [9.0]
    # a rule that may read any name (a selector without one) keeps every family
    rules.write_text("groups:\n  - name: g\n    rules:\n      - {record: n, expr: 'count({job=\"vllm\"})'}\n")
    pipeline.set_rules(load_files([rules]))
    pipeline.observe("a:8000", 30.0, page)
    assert [s.at(30_000) for s in pipeline.store.select("process_open_fds")] == [12.0]
