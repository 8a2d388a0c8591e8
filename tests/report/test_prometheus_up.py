"""A Prometheus target is charged the steps its `up` series exists, checked against a real, backfilled Prometheus."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.report.promrange import from_prometheus, up_expr
from kvdoctor.sources.client import PromClient
from tests.support.prometheus import PrometheusServer, backfill, binaries

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(binaries() is None, reason="prometheus/promtool not installed"),
]

T0 = 1796000400.0  # 2026-11-30 01:00 UTC, on the hour
STEP = 60.0
STEPS = 120  # two hours at one-minute steps
END = T0 + (STEPS - 1) * STEP
HEALTHY = 2  # kvdoctor_bottleneck_code of `healthy`
TOKENS_PER_STEP = 6000.0
# "full" is scraped and diagnosed all range; "half" is scraped the first hour only, and kvdoctor exported its
# verdict for the first half hour of that (say kvdoctor was restarted and came back after "half" was gone);
# "gone" too is scraped the first hour only, but its verdict series runs on (a kvdoctor whose target list is stale).
UP_STEPS = {"full:8000": STEPS, "half.example:8000": STEPS // 2, "gone:8000": STEPS // 2}
VERDICT_STEPS = {"full:8000": STEPS, "half.example:8000": STEPS // 4, "gone:8000": STEPS}


def _openmetrics() -> str:
    lines = ["# TYPE kvdoctor_bottleneck_code gauge"]
    for target, n in VERDICT_STEPS.items():
        lines += [
            f'kvdoctor_bottleneck_code{{target="{target}",model_name="m"}} {HEALTHY} {T0 + i * STEP:.0f}'
            for i in range(n)
        ]
    lines.append("# TYPE up gauge")
    for target, n in UP_STEPS.items():
        lines += [f'up{{instance="{target}",job="vllm"}} 1 {T0 + i * STEP:.0f}' for i in range(n)]
    lines.append("# TYPE vllm:generation_tokens counter")
    for target, n in UP_STEPS.items():
        lines += [
            f'vllm:generation_tokens_total{{instance="{target}",job="vllm",model_name="m"}} '
            f"{i * TOKENS_PER_STEP} {T0 + i * STEP:.0f}"
            for i in range(n)
        ]
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus over a TSDB backfilled with two targets' `up`, verdicts and token counters."""
    work = tmp_path_factory.mktemp("prom-up")
    om = work / "up.om"
    om.write_text(_openmetrics())
    found = binaries()
    assert found is not None
    backfill(om, work / "tsdb", promtool=found[1])
    with PrometheusServer(work / "tsdb", work, binary=found[0]) as server:
        yield server.url


def _report(url: str, tmp_path: Path) -> dict[str, dict]:
    out = tmp_path / "r.json"
    args = [
        "report",
        "--prometheus-url",
        url,
        "--start",
        str(T0),
        "--end",
        str(END),
        "--step",
        "60s",
        "--gpu-hour-cost",
        "2.5",
        "--gpus-per-target",
        "2",
        "--format",
        "json",
        "-o",
        str(out),
    ]
    assert main(args) == 0
    return {e["target"]: e for e in json.loads(out.read_text())["targets"]}


def test_a_target_whose_up_spans_half_the_range_is_charged_half(prometheus: str, tmp_path: Path) -> None:
    by = _report(prometheus, tmp_path)
    full, half = by["full:8000"], by["half.example:8000"]
    assert full["hours"]["total"] == pytest.approx(2.0)
    assert half["hours"]["total"] == pytest.approx(1.0)
    gone = by["gone:8000"]["hours"]  # healthy while scraped, not charged the hour after
    assert gone["total"] == pytest.approx(1.0) and gone["healthy"] == pytest.approx(1.0)
    assert half["gpu_hours"] == pytest.approx(2.0) and full["gpu_hours"] == pytest.approx(4.0)
    assert half["cost_usd"] == pytest.approx(5.0) and full["cost_usd"] == pytest.approx(10.0)
    # its tokens: one counter increase per scraped step after the first sample
    assert half["generation_tokens"] == pytest.approx((STEPS // 2 - 1) * TOKENS_PER_STEP)
    assert half["cost_per_1m_generation_tokens_usd"] == pytest.approx(
        5.0 / half["generation_tokens"] * 1e6, rel=0.01
    )


def test_hours_with_up_but_no_verdict_are_charged_as_unknown(prometheus: str) -> None:
    history = from_prometheus(PromClient(prometheus), T0, END, STEP)
    seconds = {k: 0.0 for k in ("healthy", "unknown")}
    for h in history.keys[("half.example:8000", "m")].hours.values():
        for cls, s in h.seconds.items():
            seconds[cls] = seconds.get(cls, 0.0) + s
    assert seconds == {"healthy": pytest.approx(1800.0), "unknown": pytest.approx(1800.0)}


def test_the_instances_are_matched_literally(prometheus: str) -> None:
    # the `.` of half.example:8000 must not let "halfXexample:8000" match
    got = PromClient(prometheus).query_range(up_expr(["halfXexample:8000"], STEP), T0, END, STEP)
    assert got == []
    got = PromClient(prometheus).query_range(up_expr(["half.example:8000", 'a"b|c\\'], STEP), T0, END, STEP)
    assert [labels["instance"] for labels, _ in got] == ["half.example:8000"]
