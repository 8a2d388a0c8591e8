"""Evaluator semantics on small hand-made series whose answers can be computed by hand."""

from __future__ import annotations

import math

import pytest

from kvdoctor.promql.values import EvalError
from kvdoctor.query import instant_query
from kvdoctor.samples import Sample
from kvdoctor.store import Store


def build(series: dict[str, list[float]], step_s: float = 15.0, start_s: float = 1000.0) -> Store:
    """One source; series given as 'name{a="b"}' -> values at start, start+step, …"""
    st = Store(retention_s=1e9)
    parsed = {}
    for spec, _ in series.items():
        name, _, rest = spec.partition("{")
        labels = tuple(tuple(p.split("=")) for p in rest.rstrip("}").replace('"', "").split(",") if p)
        parsed[spec] = (name, labels)
    n = max(len(v) for v in series.values())
    for i in range(n):
        samples = [
            Sample(parsed[k][0], parsed[k][1], v[i])
            for k, v in series.items()
            if i < len(v) and v[i] is not None
        ]
        st.ingest("t", round((start_s + i * step_s) * 1000), samples)
    return st


def values(st: Store, expr: str, t: float) -> dict[tuple, float]:
    data = instant_query(st, expr, t)
    assert data["resultType"] == "vector", data
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["result"]}


def one(st: Store, expr: str, t: float) -> float:
    vals = values(st, expr, t)
    assert len(vals) == 1, vals
    return next(iter(vals.values()))


def test_rate_of_a_steady_counter_is_its_slope():
    st = build({"c_total": [i * 30.0 for i in range(41)]})  # +30 every 15 s = 2/s
    assert one(st, "rate(c_total[5m])", 1000 + 40 * 15) == pytest.approx(2.0)
    assert one(st, "increase(c_total[1m])", 1000 + 40 * 15) == pytest.approx(120.0)
    assert one(st, "irate(c_total[1m])", 1000 + 40 * 15) == pytest.approx(2.0)


def test_rate_handles_a_counter_reset():
    st = build({"c_total": [100, 130, 160, 10, 40, 70]})
    # samples in [T-75s, T]: all six; increase = 70-100 + 160 (reset) = 130 over 75 s, then extrapolated
    raw = 130.0
    got = one(st, "increase(c_total[75s])", 1075)
    assert got == pytest.approx(raw * 75 / 75)
    assert one(st, "resets(c_total[2m])", 1075) == 1


def test_extrapolation_clamps_at_counter_zero():
    st = build({"c_total": [5, 35, 65]})  # started recently: extrapolating back would go below zero
    # to_start = 1000 - (1030 - 60) = 30 s, to_zero = 30 s * 5/60 = 2.5 s; to_end = 0; factor = (30 + 2.5) / 30
    assert one(st, "increase(c_total[1m])", 1030) == pytest.approx(60 * 32.5 / 30)


def test_histogram_quantile_interpolates_within_the_bucket():
    st = build(
        {
            'h_bucket{le="0.1"}': [0, 10],
            'h_bucket{le="0.5"}': [0, 30],
            'h_bucket{le="1.0"}': [0, 40],
            'h_bucket{le="+Inf"}': [0, 40],
        }
    )
    # rank 0.5*40 = 20 falls in (0.1, 0.5]: 0.1 + 0.4 * (20-10)/20
    assert one(st, "histogram_quantile(0.5, increase(h_bucket[1m]))", 1015) == pytest.approx(0.3)
    assert one(st, "histogram_quantile(0.99, increase(h_bucket[1m]))", 1015) == pytest.approx(
        0.5 + 0.5 * (39.6 - 30) / 10
    )


def test_histogram_without_inf_bucket_is_nan():
    st = build({'h_bucket{le="1"}': [1, 2]})
    assert math.isnan(one(st, "histogram_quantile(0.5, h_bucket)", 1015))


def test_aggregation_and_matching():
    st = build(
        {
            'run{e="0",m="a"}': [3],
            'run{e="1",m="a"}': [5],
            'wait{e="0",m="a",r="capacity"}': [2],
            'wait{e="0",m="a",r="deferred"}': [1],
        }
    )
    assert values(st, "sum by (m) (run)", 1000) == {(("m", "a"),): 8.0}
    assert one(st, "max without (e) (run)", 1000) == 5.0
    assert one(st, "count(run)", 1000) == 2
    got = values(st, "wait * on(e, m) group_left run", 1000)
    assert got == {
        (("e", "0"), ("m", "a"), ("r", "capacity")): 6.0,
        (("e", "0"), ("m", "a"), ("r", "deferred")): 3.0,
    }
    with pytest.raises(EvalError, match="many-to-many"):
        instant_query(st, "run + on(e) wait", 1000)
    assert values(st, "run > 4", 1000) == {(("__name__", "run"), ("e", "1"), ("m", "a")): 5.0}
    assert values(st, "run > bool 4", 1000) == {(("e", "0"), ("m", "a")): 0.0, (("e", "1"), ("m", "a")): 1.0}
    assert list(values(st, "topk(1, run)", 1000).values()) == [5.0]
    assert values(st, "run unless on(e) wait", 1000) == {(("__name__", "run"), ("e", "1"), ("m", "a")): 5.0}


def test_label_functions_and_absent():
    st = build({'g{model_name="qwen"}': [1]})
    got = values(st, 'label_replace(g, "family", "$1", "model_name", "(q[a-z]+)")', 1000)
    assert ("family", "qwen") in next(iter(got))
    assert values(st, 'absent(nope{job="vllm"})', 1000) == {(("job", "vllm"),): 1.0}
    assert values(st, "absent(g)", 1000) == {}
    assert one(st, 'label_join(g, "x", "-", "model_name", "model_name")', 1000) == 1.0


def test_subquery_steps_are_aligned_to_the_step():
    st = build({"g": [float(i) for i in range(21)]}, step_s=15, start_s=900)
    # steps at multiples of 60 s within [1200-120, 1200]: 1080, 1140, 1200 -> g = 12, 16, 20
    assert one(st, "max_over_time(g[2m:1m])", 1200) == 20
    assert one(st, "min_over_time(g[2m:1m])", 1200) == 12
    assert one(st, "count_over_time(g[2m:1m])", 1200) == 3


def test_scalars_and_time():
    st = build({"g": [2]})
    assert instant_query(st, "time()", 1000)["result"] == [1000.0, "1000"]
    assert instant_query(st, "scalar(g) * 2", 1000)["result"][1] == "4"
    assert one(st, "vector(1) + 1", 1000) == 2
    assert math.isinf(one(st, "g / 0", 1000))
    assert one(st, "clamp_max(g, 1)", 1000) == 1
    assert one(st, "round(g / 3, 0.1)", 1000) == pytest.approx(0.7)


@pytest.mark.parametrize(
    ("aggregation", "argument"),
    [
        ("sum by (m) ({})", "rate(c_total[1m])"),
        ("sum without (e) ({})", "rate(c_total[1m])"),
        ("max by (__name__) ({})", "last_over_time(c_total[1m])"),  # keeps the name: grouped by it
        ("count by (__name__) ({})", "rate(c_total[1m])"),  # rate drops the name: one group
        ("sum by (m) ({})", 'rate({__name__=~"c_total|d_total"}[1m])'),
        ("avg({})", "max_over_time(c_total[2m])"),
        ("topk(1, {})", "rate(c_total[1m])"),
        ("quantile(0.5, {})", "increase(c_total[90s])"),
    ],
)
def test_an_aggregation_over_a_range_function_equals_it_over_the_functions_output(
    aggregation: str, argument: str
) -> None:
    # the evaluator aggregates `rate(x[r])` series by series without building rate's output; in parentheses,
    # rate's output is built first, as for any other argument (the reference); series with a reset and a stale gap
    st = build(
        {
            'c_total{e="0",m="a"}': [10, 40, 70, 5, 35, 65, 95],
            'c_total{e="1",m="a"}': [0, 3, None, None, 9, 12, 15],
            'c_total{e="0",m="b"}': [1, 2, 3, 4, 5, 6, 7],
            'd_total{e="2",m="b"}': [7, 7, 7, 8, 8, 9, 9],
        }
    )
    direct, reference = aggregation.format(argument), aggregation.format(f"({argument})")
    for t in (1045, 1090):
        assert values(st, direct, t) == values(st, reference, t)
    # [1030, 1090]: e=0 rises 70 -> 95 through a reset (95 over the 60 s); e=1 is back at 1060 after its gap,
    # 6 over 30 s extrapolated by half a step to its start (7.5); m=b rises 4
    assert values(st, "sum by (m) (rate(c_total[1m]))", 1090) == {
        (("m", "a"),): pytest.approx(95 / 60 + 7.5 / 60),
        (("m", "b"),): pytest.approx(4 / 60),
    }


def test_an_aggregation_over_series_of_several_names_still_refuses_what_collides_without_them() -> None:
    st = build({'c_total{m="a"}': [1, 2, 3], 'd_total{m="a"}': [1, 2, 3]})
    for expr in (
        'sum(rate({__name__=~"c_total|d_total"}[1m]))',
        'sum((rate({__name__=~"c_total|d_total"}[1m])))',
    ):
        with pytest.raises(EvalError, match="same labelset"):
            instant_query(st, expr, 1030)
