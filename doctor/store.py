"""The windowed series store: per-source ring of samples with Prometheus' staleness and lookback semantics."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

from doctor.samples import Labels, Sample

LOOKBACK_MS = 300_000  # Prometheus' default 5-minute lookback for instant selectors
STALE = None  # staleness marker as ingest and the `vs` view spell it (stored as NaN plus its timestamp)
_NAN = math.nan


class Series:
    """One series: canonical labels, timestamps (ms) and values in typed arrays; stale markers noted by time."""

    __slots__ = ("_stale", "_t", "_v", "labels", "name")

    def __init__(self, labels: Labels) -> None:
        self.labels = labels
        self.name = dict(labels).get("__name__", "")
        self._t = array("q")
        self._v = array("d")
        self._stale: list[int] | None = None  # timestamps of stale markers, ascending

    @property
    def ts(self) -> list[int]:
        """Sample timestamps (ms), stale markers included."""
        return self._t.tolist()

    @property
    def vs(self) -> list[float | None]:
        """Sample values, None where a stale marker is."""
        vs: list[float | None] = self._v.tolist()  # type: ignore[assignment]
        if self._stale:
            stale = set(self._stale)
            vs = [None if t in stale else v for t, v in zip(self._t, vs, strict=True)]
        return vs

    def append(self, t: int, v: float | None) -> None:
        """Append a sample; out-of-order or duplicate timestamps are dropped, as Prometheus does."""
        ts = self._t
        if ts and t <= ts[-1]:
            return
        ts.append(t)
        if v is None:
            self._v.append(_NAN)
            if self._stale is None:
                self._stale = []
            self._stale.append(t)
        else:
            self._v.append(v)

    def _is_stale(self, t: int) -> bool:
        stale = self._stale
        if not stale:
            return False
        i = bisect_left(stale, t)
        return i < len(stale) and stale[i] == t

    def at(self, t: int, lookback_ms: int = LOOKBACK_MS) -> float | None:
        """The value an instant selector sees at t: newest sample in [t - lookback, t] (Prometheus 2.x), unless stale."""
        ts = self._t
        n = len(ts)
        i = n if n and ts[n - 1] <= t else bisect_right(ts, t)
        if i == 0:
            return None
        last = ts[i - 1]
        if last < t - lookback_ms:
            return None
        v = self._v[i - 1]
        if v != v and self._is_stale(last):
            return None
        return v

    def window(self, start: int, end: int) -> tuple[list[int], list[float]]:
        """Samples with start <= t <= end, staleness markers removed (Prometheus 2.x range selection)."""
        ts = self._t
        i = bisect_left(ts, start)
        j = bisect_right(ts, end)
        tl, vl = ts[i:j].tolist(), self._v[i:j].tolist()
        stale = self._stale
        if stale:
            k = bisect_left(stale, start)
            if k < len(stale) and stale[k] <= end:
                gone = set(stale[k : bisect_right(stale, end)])
                pairs = [(t, v) for t, v in zip(tl, vl, strict=True) if t not in gone]
                return [t for t, _ in pairs], [v for _, v in pairs]
        return tl, vl

    def trim(self, before: int) -> None:
        """Forget samples older than `before`."""
        ts = self._t
        if not ts or ts[0] >= before:
            return
        i = bisect_left(ts, before)
        del ts[:i]
        del self._v[:i]
        if self._stale:
            del self._stale[: bisect_left(self._stale, before)]

    def only_stale(self) -> bool:
        """True when nothing but stale markers (or nothing at all) is left."""
        return len(self._t) == len(self._stale or ())


class _Source:
    """What one source (a scrape target, a rule) last wrote, to append the next write without lookups."""

    __slots__ = ("cache", "epoch", "labels", "names", "ndups", "seq", "trimmed_ms")

    def __init__(self) -> None:
        self.cache: dict[tuple[str, Labels], Series] = {}  # (name, labels as written) -> series
        self.labels: list[Labels] = []  # the latest write, sample by sample ...
        self.names: list[str] = []
        self.seq: list[Series | None] = []  # ... and the series each went to (None: a duplicate)
        self.ndups = 0
        self.epoch = -1  # the store's removal epoch when seq was built
        self.trimmed_ms = 0


class Store:
    """All series, indexed by metric name, and per source the series its latest write touched."""

    def __init__(self, retention_s: float = 1800.0, lookback_ms: int = LOOKBACK_MS) -> None:
        self.retention_ms = int(retention_s * 1000)
        self.lookback_ms = lookback_ms
        self._series: dict[Labels, Series] = {}
        self._by_name: dict[str, dict[Labels, Series]] = {}
        self._sorted: dict[str | None, list[Series]] = {}  # name -> its series in label order, until one changes
        self._sources: dict[str, _Source] = {}
        self._retired: dict[str, _Source] = {}  # forgotten sources whose series still age out
        self._epoch = 0  # bumped whenever a series leaves the store
        self._swept_ms = 0
        self.newest_ms = 0

    def ingest(
        self, source: str, t_ms: int, samples: Iterable[Sample], extra: Labels = (), staleness: bool = True
    ) -> int:
        """Write one scrape (or rule result) at t_ms; series gone since the last write get a stale marker.

        Returns the number of duplicate series dropped.
        """
        src = self._sources.get(source)
        if src is None:
            src = self._sources[source] = self._retired.pop(source, None) or _Source()
        batch = samples if isinstance(samples, list) else list(samples)
        if not (src.epoch == self._epoch and self._append_same(src, t_ms, batch)):
            self._append_changed(src, t_ms, batch, extra, staleness)
        self._tick(t_ms)
        if self.retention_ms and t_ms - src.trimmed_ms >= self.retention_ms // 8:
            self._trim_source(src)
            src.trimmed_ms = t_ms
        return src.ndups

    def _append_same(self, src: _Source, t_ms: int, batch: list[Sample]) -> bool:
        """The common case: the same series in the same order as last time; False (nothing lost) otherwise."""
        labels, names, seq = src.labels, src.names, src.seq
        if len(batch) != len(labels):
            return False
        for i, s in enumerate(batch):
            if s.labels != labels[i] or s.name != names[i]:  # cheap: the parser hands out the same tuples
                return False  # appends done so far are repeated as no-ops (same timestamp) by the slow path
            ser = seq[i]
            if ser is not None:
                ts = ser._t
                if not ts or t_ms > ts[-1]:
                    ts.append(t_ms)
                    ser._v.append(s.value)
        return True

    def _append_changed(
        self, src: _Source, t_ms: int, batch: list[Sample], extra: Labels, staleness: bool
    ) -> None:
        cache, index = src.cache, self._series
        seen: set[Series] = set()
        seq: list[Series | None] = []
        for s in batch:
            ck = (s.name, s.labels)
            ser = cache.get(ck)
            if ser is None or index.get(ser.labels) is not ser:
                merged = dict(s.labels)
                merged.update(extra)
                merged["__name__"] = s.name
                ser = cache[ck] = self._get(tuple(sorted(merged.items())))
            if ser in seen:
                seq.append(None)
                continue
            seen.add(ser)
            seq.append(ser)
            ser.append(t_ms, s.value)
        if staleness:
            for old in src.seq:
                if old is not None and old not in seen and index.get(old.labels) is old:
                    old.append(t_ms, STALE)
        src.labels = [s.labels for s in batch]
        src.names = [s.name for s in batch]
        src.seq, src.ndups, src.epoch = seq, len(batch) - len(seen), self._epoch

    def mark_down(self, source: str, t_ms: int) -> None:
        """A failed scrape: every series of the source goes stale, as in Prometheus."""
        src = self._sources.get(source)
        if src is not None:
            for ser in src.seq:
                if ser is not None and self._series.get(ser.labels) is ser:
                    ser.append(t_ms, STALE)
            src.labels, src.names, src.seq, src.ndups = [], [], [], 0
        self._tick(t_ms)

    def forget_source(self, source: str) -> None:
        """Stop tracking a removed source (its samples age out with retention)."""
        src = self._sources.pop(source, None)
        if src is not None:
            src.labels, src.names, src.seq = [], [], []
            self._retired[source] = src

    def select(self, name: str | None) -> Iterator[Series]:
        """Series with this metric name (all series when name is None)."""
        if name is None:
            return iter(list(self._series.values()))
        return iter(list(self._by_name.get(name, {}).values()))

    def sorted_series(self, name: str | None) -> list[Series]:
        """Series with this metric name (all when None) in label order; the list is shared, do not modify it."""
        out = self._sorted.get(name)
        if out is None:
            out = sorted(self.select(name), key=lambda s: s.labels)
            self._sorted[name] = out
        return out

    def sources(self) -> list[str]:
        """Sources written so far."""
        return list(self._sources)

    def present(self, source: str) -> set[Labels]:
        """Series in the latest write of a source."""
        src = self._sources.get(source)
        return {s.labels for s in src.seq if s is not None} if src else set()

    def __len__(self) -> int:
        return len(self._series)

    def _get(self, key: Labels) -> Series:
        s = self._series.get(key)
        if s is None:
            s = Series(key)
            self._series[key] = s
            self._by_name.setdefault(s.name, {})[key] = s
            self._sorted.pop(s.name, None)
            self._sorted.pop(None, None)
        return s

    def _tick(self, t_ms: int) -> None:
        self.newest_ms = max(self.newest_ms, t_ms)
        if self._retired and self.newest_ms - self._swept_ms >= self.retention_ms // 8:
            self._swept_ms = self.newest_ms
            for name, src in list(self._retired.items()):
                self._trim_source(src)
                if not src.cache:
                    del self._retired[name]

    def _trim_source(self, src: _Source) -> None:
        """Trim the series a source wrote; drop those left empty or stale-only that it no longer writes."""
        cutoff = self.newest_ms - self.retention_ms
        current = {id(s) for s in src.seq}
        dead = []
        for ck, s in src.cache.items():
            s.trim(cutoff)
            if s.only_stale() and id(s) not in current:
                dead.append(ck)
        for ck in dead:
            self._remove(src.cache.pop(ck))

    def _remove(self, s: Series) -> None:
        if self._series.get(s.labels) is not s:
            return
        del self._series[s.labels]
        self._epoch += 1
        self._sorted.pop(s.name, None)
        self._sorted.pop(None, None)
        byname = self._by_name.get(s.name)
        if byname is not None:
            byname.pop(s.labels, None)
            if not byname:
                del self._by_name[s.name]

    def compact(self) -> None:
        """Trim samples past retention and drop series left empty (sources trim their own series as they write)."""
        for src in (*self._sources.values(), *self._retired.values()):
            self._trim_source(src)
        cutoff = self.newest_ms - self.retention_ms
        for s in list(self._series.values()):
            s.trim(cutoff)
            if not s._t:
                self._remove(s)
