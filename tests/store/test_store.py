"""The store follows Prometheus: 5-minute lookback, staleness on vanished series and failed scrapes, retention."""

from __future__ import annotations

import random

from kvdoctor.samples import Sample
from kvdoctor.store import Store
from kvdoctor.store.series import spans


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


def _reference_run(steps: int, seed: int, retention_s: float) -> None:
    """Random scrapes, vanishing series, failed scrapes and late writes, against a plain model of the semantics."""
    rng = random.Random(seed)
    st = Store(retention_s=retention_s)
    model: dict[tuple, list[tuple[int, float | None]]] = {}
    present: dict[str, set[tuple]] = {"a": set(), "b": set()}

    def put(key: tuple, t: int, v: float | None) -> None:
        pts = model.setdefault(key, [])
        if not pts or t > pts[-1][0]:
            pts.append((t, v))

    labels = {n: (("i", n),) for n in "uvwxyz"}  # the same tuples every scrape, as the parser hands out
    for k in range(1, steps):
        for src in ("a", "b"):
            t = k * 1_000 - (500 if rng.random() < 0.05 else 0)
            roll = rng.random()
            if roll < 0.1:
                st.mark_down(src, t)
                for key in present[src]:
                    put(key, t, None)
                present[src] = set()
                continue
            names = list("uvwxyz") if roll < 0.7 else rng.sample("uvwxyz", rng.randint(0, 6))
            if rng.random() < 0.1:
                names.append(names[0] if names else "u")  # a duplicate series in one scrape
            batch = [Sample("g", labels[n], float(rng.randint(0, 9))) for n in names]
            st.ingest(src, t, batch, (("src", src),))
            now: set[tuple] = set()
            for s in batch:
                key = (("__name__", "g"), ("i", s.labels[0][1]), ("src", src))
                if key not in now:
                    now.add(key)
                    put(key, t, s.value)
            for key in present[src] - now:
                put(key, t, None)
            present[src] = now
        cutoff = st.newest_ms - st.retention_ms
        by_key = {s.labels: s for s in st.select("g")}
        for key, pts in model.items():
            want = [(t, v) for t, v in pts if t >= cutoff]
            if not any(v is not None for _, v in want):
                continue  # may have aged out
            s = by_key[key]
            got = [(t, v) for t, v in zip(s.ts, s.vs, strict=True) if t >= cutoff]
            assert got == want, (k, key)
            assert s.at(k * 1_000) == (pts[-1][1] if pts[-1][0] >= k * 1_000 - 300_000 else None)


def test_store_matches_a_plain_model_of_prometheus_semantics():
    _reference_run(300, seed=1, retention_s=1e9)


def test_store_matches_the_model_while_trimming_by_retention():
    _reference_run(400, seed=2, retention_s=40)


def test_series_that_stop_after_a_failed_scrape_keep_their_own_history():
    st = Store()
    labels = {n: (("i", n),) for n in "uvw"}
    for k in range(1, 4):
        st.ingest("t", k * 1_000, [Sample("g", labels[n], float(k)) for n in "uvw"])
    st.mark_down("t", 4_000)
    st.ingest("t", 5_000, [Sample("g", labels["u"], 5.0)])
    st.ingest("t", 6_000, [Sample("g", labels["u"], 6.0)])
    got = {x.labels[1][1]: (x.ts, x.vs) for x in st.select("g")}
    assert got["u"] == ([1_000, 2_000, 3_000, 4_000, 5_000, 6_000], [1.0, 2.0, 3.0, None, 5.0, 6.0])
    assert got["w"] == ([1_000, 2_000, 3_000, 4_000], [1.0, 2.0, 3.0, None])
    assert only_w(st).window(0, 10_000) == ([1_000, 2_000, 3_000], [1.0, 2.0, 3.0])


def only_w(st: Store):
    return next(x for x in st.select("g") if ("i", "w") in x.labels)


def test_spans_of_series_in_lockstep_are_each_series_own_window():
    st = Store()
    for k in range(6):  # one target's bucket series, written together; one goes stale and comes back
        samples = [s("h_bucket", float(k * (i + 1)), le=str(i)) for i in range(3) if not (k == 3 and i == 1)]
        st.ingest("t", 1_000 * (k + 1), samples, (("instance", "t"),))
    st.ingest("u", 2_500, [s("h_bucket", 7.0, le="0")], (("instance", "u"),))  # another target's timestamps
    series = sorted(st.select("h_bucket"), key=lambda x: x.labels)
    got = [(x.labels, list(ts), list(vs)) for x, ts, vs in spans(series, 2_000, 5_000)]
    assert got == [(x.labels, *x.window(2_000, 5_000)) for x in series]
    assert [len(ts) for _, ts, _ in got] == [4, 3, 4, 1]  # the stale marker at 4 s is left out of le="1"
