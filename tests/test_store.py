"""The store follows Prometheus: 5-minute lookback, staleness on vanished series and failed scrapes, retention."""

from __future__ import annotations

from doctor.samples import Sample
from doctor.store import Store


def s(name: str, value: float, **labels: str) -> Sample:
    return Sample(name, tuple(labels.items()), value)


def only(store: Store, name: str):
    series = list(store.select(name))
    assert len(series) == 1
    return series[0]


def test_instant_lookback_is_five_minutes_closed():
    st = Store()
    st.ingest("t", 1_000, [s("g", 1.0)])
    g = only(st, "g")
    assert g.at(1_000) == 1.0
    assert g.at(301_000) == 1.0  # exactly 5 minutes later: still visible (Prometheus 2.x)
    assert g.at(301_001) is None
    assert g.at(999) is None


def test_vanished_series_goes_stale_at_once():
    st = Store()
    st.ingest("t", 1_000, [s("g", 1.0, a="x"), s("g", 2.0, a="y")])
    st.ingest("t", 2_000, [s("g", 1.5, a="x")])
    ys = [x for x in st.select("g") if ("a", "y") in x.labels]
    assert ys[0].at(1_500) == 2.0
    assert ys[0].at(2_000) is None


def test_failed_scrape_marks_every_series_stale_and_range_skips_markers():
    st = Store()
    st.ingest("t", 1_000, [s("c_total", 1.0)])
    st.ingest("t", 2_000, [s("c_total", 2.0)])
    st.mark_down("t", 3_000)
    st.ingest("t", 4_000, [s("c_total", 3.0)])
    c = only(st, "c_total")
    assert c.at(3_500) is None
    assert c.at(4_000) == 3.0
    assert c.window(0, 5_000) == ([1_000, 2_000, 4_000], [1.0, 2.0, 3.0])


def test_sources_do_not_interfere():
    st = Store()
    st.ingest("a", 1_000, [s("g", 1.0)], (("instance", "a"),))
    st.ingest("b", 1_000, [s("g", 2.0)], (("instance", "b"),))
    st.mark_down("a", 2_000)
    by_inst = {dict(x.labels)["instance"]: x for x in st.select("g")}
    assert by_inst["a"].at(2_000) is None
    assert by_inst["b"].at(2_000) == 2.0


def test_duplicates_and_out_of_order_samples_are_dropped():
    st = Store()
    dups = st.ingest("t", 2_000, [s("g", 1.0), s("g", 9.0)])
    assert dups == 1
    st.ingest("t", 1_000, [s("g", 5.0)])
    assert only(st, "g").window(0, 3_000) == ([2_000], [1.0])


def test_retention_bounds_memory():
    st = Store(retention_s=60)
    for i in range(1000):
        st.ingest("t", i * 1_000, [s("g", float(i)), s(f"churn_{i}", 1.0)])
    st.compact()
    g = only(st, "g")
    assert g.ts[0] >= 999_000 - 60_000
    assert len(st) <= 62  # g plus the churned series still inside retention
