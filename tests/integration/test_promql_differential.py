"""kvdoctor's embedded PromQL evaluator answers like a real Prometheus over the same recorded vLLM data."""

from __future__ import annotations

import json
from bisect import bisect_right
from pathlib import Path
from typing import Any

import pytest

from tests.support.openmetrics import Dataset
from tests.support.prometheus import PrometheusError, PrometheusServer
from tests.support.promql_compare import compare, differential, load_exprs
from tests.support.scenario import SHARED, Scenario, clear_instant

pytestmark = pytest.mark.integration

EXPR_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "promql" / "differential_exprs.txt"
EXPRS = load_exprs(EXPR_FILE)
# Prometheus refuses these at evaluation time; the embedded evaluator must raise too, not answer.
EXEC_ERRORS = (
    "vllm:num_requests_waiting_by_reason / on (instance) vllm:num_requests_running",
    'label_replace(vllm:num_requests_running, "instance", "x", "instance", ".*")',
    "vllm:num_requests_waiting_by_reason * on (instance) group_left vllm:num_requests_waiting_by_reason",
)
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
LOOKBACK_MS = 300_000


def labelled_instant(scenario: Scenario) -> float:
    """Ten seconds into kv_bound's labelled steady window (labels.json), else the sixth query instant."""
    labels = SHARED / "labels.json"
    if labels.is_file():
        for entry in json.loads(labels.read_text()):
            if entry["file"] == "kv_bound.jsonl.gz":
                return clear_instant(entry["steady_from"] + 10, scenario.sample_ms)
    return scenario.instants[5]


def raw_instant(data: Dataset, name: str, t: float) -> dict[frozenset[tuple[str, str]], float]:
    """What an instant selector must return at t, computed from the prometheus_client-parsed recordings."""
    t_ms = round(t * 1000)
    out = {}
    for labels, pts in data.points(name).items():
        i = bisect_right([p[0] for p in pts], t_ms)
        if i and pts[i - 1][0] >= t_ms - LOOKBACK_MS:
            out[frozenset((*labels, ("__name__", name)))] = pts[i - 1][1]
    return out


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
def test_backfilled_prometheus_returns_recorded_data(
    prometheus: PrometheusServer, scenario: Scenario
) -> None:
    t = labelled_instant(scenario)
    data = prometheus.query("vllm:num_requests_running", t)
    assert data["resultType"] == "vector"
    present = {
        key.split(":")[0]
        for key, first in scenario.events.items()
        if key.endswith(":first") and first <= t <= scenario.events[key[: -len("first")] + "last"] + 300
    }
    assert {"a", "b", "c"} <= present
    assert {r["metric"]["instance"] for r in data["result"]} == present
    assert all(r["metric"]["job"] == "vllm" for r in data["result"])
    kv = prometheus.query('vllm:kv_cache_usage_perc{instance="a"}', t)["result"]
    assert len(kv) == 1 and float(kv[0]["value"][1]) > 0.5  # kv_bound's cache is nearly full


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
@pytest.mark.parametrize("gauge", GAUGES)
def test_prometheus_instant_values_equal_raw_gauges(
    prometheus: PrometheusServer, scenario: Scenario, dataset: tuple[Dataset, Path], gauge: str
) -> None:
    for t in scenario.instants:
        expected = raw_instant(dataset[0], gauge, t)
        got = {
            frozenset(r["metric"].items()): float(r["value"][1]) for r in prometheus.query(gauge, t)["result"]
        }
        assert got == expected, f"{gauge} at {t:.3f}"


def test_counter_reset_and_vanished_target_are_in_the_data(
    prometheus: PrometheusServer, scenario: Scenario
) -> None:
    after_restart = scenario.events["a:healthy:first"] + 20
    resets = prometheus.query('resets(vllm:prompt_tokens_total{instance="a"}[1m])', after_restart)["result"]
    assert [float(r["value"][1]) for r in resets] == [1.0]
    after_vanish = scenario.events["b:batch_cap:last"] + 70
    rate = prometheus.query('rate(vllm:prompt_tokens_total{instance="b"}[1m])', after_vanish)["result"]
    assert rate == []


def test_expression_file_is_big_and_valid_promql(prometheus: PrometheusServer, scenario: Scenario) -> None:
    assert len(EXPRS) >= 60
    assert len(set(EXPRS)) == len(EXPRS), "duplicate expressions"
    for expr in EXPRS:
        prometheus.query(expr, scenario.instants[6])  # raises with Prometheus' error for a bad expression


def test_comparison_reports_what_differs() -> None:
    exp = {"resultType": "vector", "result": [{"metric": {"i": "a"}, "value": [1.0, "NaN"]}]}
    same = {"resultType": "vector", "result": [{"metric": {"i": "a"}, "value": [1.0, "NaN"]}]}
    other = {"resultType": "vector", "result": [{"metric": {"i": "b"}, "value": [1.0, "2"]}]}
    assert compare(exp, same) == []
    assert compare(exp, other) == ['extra   {i="b"} = [1.0, "2"]', 'missing {i="a"} = [1.0, "NaN"]']


@pytest.mark.parametrize("expr", [pytest.param(e, id=f"{i:03d} {e[:60]}") for i, e in enumerate(EXPRS)])
def test_embedded_matches_prometheus(
    prometheus: PrometheusServer, embedded: Any, embedded_store: Any, scenario: Scenario, expr: str
) -> None:
    def ours(e: str, t: float) -> dict[str, Any]:
        return embedded.instant_query(embedded_store, e, t)  # type: ignore[no-any-return]

    mismatches = differential(expr, scenario.instants, prometheus.query, ours)
    if mismatches:
        shown = "\n".join(str(m) for m in mismatches[:5])
        pytest.fail(
            f"{expr}: {len(mismatches)}/{len(scenario.instants)} instants differ\n{shown}",
            pytrace=False,
        )


@pytest.mark.parametrize("expr", EXEC_ERRORS)
def test_embedded_refuses_what_prometheus_refuses(
    prometheus: PrometheusServer, embedded: Any, embedded_store: Any, scenario: Scenario, expr: str
) -> None:
    t = scenario.instants[5]
    with pytest.raises(PrometheusError, match="execution"):
        prometheus.query(expr, t)
    with pytest.raises(Exception):  # noqa: B017 - any error is right; an answer is wrong
        embedded.instant_query(embedded_store, expr, t)
