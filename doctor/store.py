"""The windowed series store: per-source ring of samples with Prometheus' staleness and lookback semantics."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

from doctor.samples import Labels, Sample

LOOKBACK_MS = 300_000  # Prometheus' default 5-minute lookback for instant selectors
STALE = None  # staleness marker stored in place of a value


class Series:
    """One series: its canonical labels and parallel lists of timestamps (ms) and values (None = stale marker)."""

    __slots__ = ("labels", "name", "ts", "vs")

    def __init__(self, labels: Labels) -> None:
        self.labels = labels
        self.name = dict(labels).get("__name__", "")
        self.ts: list[int] = []
        self.vs: list[float | None] = []

    def append(self, t: int, v: float | None) -> None:
        """Append a sample; out-of-order or duplicate timestamps are dropped, as Prometheus does."""
        if self.ts and t <= self.ts[-1]:
            return
        self.ts.append(t)
        self.vs.append(v)

    def at(self, t: int, lookback_ms: int = LOOKBACK_MS) -> float | None:
        """The value an instant selector sees at t: newest sample in [t - lookback, t] (Prometheus 2.x), unless stale."""
        i = bisect_right(self.ts, t)
        if i == 0 or self.ts[i - 1] < t - lookback_ms:
            return None
        return self.vs[i - 1]

    def window(self, start: int, end: int) -> tuple[list[int], list[float]]:
        """Samples with start <= t <= end, staleness markers removed (Prometheus 2.x range selection)."""
        i = bisect_left(self.ts, start)
        j = bisect_right(self.ts, end)
        ts, vs = self.ts[i:j], self.vs[i:j]
        if None in vs:
            pairs = [(t, v) for t, v in zip(ts, vs, strict=True) if v is not None]
            return [t for t, _ in pairs], [v for _, v in pairs]
        return ts, vs  # type: ignore[return-value]

    def trim(self, before: int) -> None:
        """Forget samples older than `before`."""
        i = bisect_left(self.ts, before)
        if i:
            del self.ts[:i]
            del self.vs[:i]


class Store:
    """All series, grouped by the source that wrote them (a scrape target or a rule group)."""

    def __init__(self, retention_s: float = 1800.0, lookback_ms: int = LOOKBACK_MS) -> None:
        self.retention_ms = int(retention_s * 1000)
        self.lookback_ms = lookback_ms
        self._series: dict[Labels, Series] = {}
        self._by_name: dict[str, dict[Labels, Series]] = {}
        self._present: dict[str, set[Labels]] = {}  # series in the latest write of each source
        self._keys: dict[str, dict[tuple[str, Labels], Labels]] = {}  # per-source cache of canonical keys
        self._writes = 0
        self.newest_ms = 0

    def ingest(
        self, source: str, t_ms: int, samples: Iterable[Sample], extra: Labels = (), staleness: bool = True
    ) -> int:
        """Write one scrape (or rule result) at t_ms; series gone since the last write get a stale marker.

        Returns the number of duplicate series dropped.
        """
        cache = self._keys.setdefault(source, {})
        present: set[Labels] = set()
        dups = 0
        for s in samples:
            ck = (s.name, s.labels)
            key = cache.get(ck)
            if key is None:
                merged = dict(s.labels)
                merged.update(extra)
                merged["__name__"] = s.name
                key = tuple(sorted(merged.items()))
                cache[ck] = key
            if key in present:
                dups += 1
                continue
            present.add(key)
            self._get(key).append(t_ms, s.value)
        if staleness:
            self._mark_stale(self._present.get(source, set()) - present, t_ms)
        self._present[source] = present
        self._tick(t_ms)
        return dups

    def mark_down(self, source: str, t_ms: int) -> None:
        """A failed scrape: every series of the source goes stale, as in Prometheus."""
        self._mark_stale(self._present.get(source, set()), t_ms)
        self._present[source] = set()
        self._tick(t_ms)

    def forget_source(self, source: str) -> None:
        """Drop the key cache of a removed source (its samples age out with retention)."""
        self._keys.pop(source, None)
        self._present.pop(source, None)

    def select(self, name: str | None) -> Iterator[Series]:
        """Series with this metric name (all series when name is None)."""
        if name is None:
            return iter(list(self._series.values()))
        return iter(list(self._by_name.get(name, {}).values()))

    def sources(self) -> list[str]:
        """Sources written so far."""
        return list(self._present)

    def present(self, source: str) -> set[Labels]:
        """Series in the latest write of a source."""
        return self._present.get(source, set())

    def __len__(self) -> int:
        return len(self._series)

    def _mark_stale(self, keys: Iterable[Labels], t_ms: int) -> None:
        for key in keys:
            s = self._series.get(key)
            if s is not None:
                s.append(t_ms, STALE)

    def _get(self, key: Labels) -> Series:
        s = self._series.get(key)
        if s is None:
            s = Series(key)
            self._series[key] = s
            self._by_name.setdefault(s.name, {})[key] = s
        return s

    def _tick(self, t_ms: int) -> None:
        self.newest_ms = max(self.newest_ms, t_ms)
        self._writes += 1
        if self._writes % 64 == 0:
            self.compact()

    def compact(self) -> None:
        """Trim samples past retention and drop series left empty."""
        cutoff = self.newest_ms - self.retention_ms
        dead = []
        for key, s in self._series.items():
            s.trim(cutoff)
            if not s.ts or (s.vs[-1] is None and all(v is None for v in s.vs)):  # only stale markers left
                dead.append(key)
        for key in dead:
            s = self._series.pop(key)
            byname = self._by_name.get(s.name)
            if byname is not None:
                byname.pop(key, None)
                if not byname:
                    del self._by_name[s.name]
