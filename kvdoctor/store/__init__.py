"""The windowed series store: per-source ring of samples with Prometheus' staleness and lookback semantics."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from operator import attrgetter

from kvdoctor.samples import Labels, Sample
from kvdoctor.store.series import LOOKBACK_MS, NAN, STALE, Series

__all__ = ["LOOKBACK_MS", "STALE", "Series", "Store"]
_LABELS, _NAME = attrgetter("labels"), attrgetter("name")


class _Source:
    """What one source (a scrape target, a rule) last wrote, to append the next write without lookups."""

    __slots__ = ("cache", "epoch", "labels", "names", "ndups", "seq", "trimmed_ms", "ts")

    def __init__(self) -> None:
        self.cache: dict[tuple[str, Labels], Series] = {}  # (name, labels as written) -> series
        self.labels: list[Labels] = []  # the latest write, sample by sample ...
        self.names: list[str] = []
        self.seq: list[Series | None] = []  # ... and the series each went to (None: a duplicate)
        self.ndups = 0
        self.epoch = -1  # the store's removal epoch when seq was built
        self.trimmed_ms = 0
        self.ts: array[int] = array("q")  # the timestamps its lockstep series share


class Store:
    """All series, indexed by metric name, and per source the series its latest write touched."""

    def __init__(self, retention_s: float = 1800.0, lookback_ms: int = LOOKBACK_MS) -> None:
        self.retention_ms = int(retention_s * 1000)
        self.lookback_ms = lookback_ms
        self._series: dict[Labels, Series] = {}
        self._by_name: dict[str, dict[Labels, Series]] = {}
        # name -> its series in label order, until one of them comes or goes
        self._sorted: dict[str | None, list[Series]] = {}
        self._sources: dict[str, _Source] = {}
        self._retired: dict[str, _Source] = {}  # forgotten sources whose series still age out
        self._epoch = 0  # bumped whenever a series leaves the store
        self._pairs: dict[tuple[str, str], tuple[str, str]] = {}
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
            src = self._sources[source] = self._retired.pop(source, _Source())
        batch = samples if isinstance(samples, list) else list(samples)
        if not (src.epoch == self._epoch and self._append_same(src, t_ms, batch)):
            self._append_changed(src, t_ms, batch, extra, staleness)
        self._tick(t_ms)
        if self.retention_ms and t_ms - src.trimmed_ms >= self.retention_ms // 8:
            self._trim_source(src)
            src.trimmed_ms = t_ms
        return src.ndups

    def _append_same(self, src: _Source, t_ms: int, batch: list[Sample]) -> bool:
        """The common case: the same series in the same order as last time; False (nothing written) otherwise."""
        if len(batch) != len(src.labels) or list(map(_LABELS, batch)) != src.labels:
            return False  # cheap when equal: the parser hands out the same label tuples
        if list(map(_NAME, batch)) != src.names:
            return False
        shared = src.ts
        grow = not shared or t_ms > shared[-1]
        for s, ser in zip(batch, src.seq, strict=True):
            if ser is None:
                continue
            if ser._t is shared:
                if grow:
                    ser._v.append(s.value)
            else:
                ts = ser._t
                if not ts or t_ms > ts[-1]:
                    ts.append(t_ms)
                    ser._v.append(s.value)
        if grow:
            shared.append(t_ms)
        return True

    def _append_changed(
        self, src: _Source, t_ms: int, batch: list[Sample], extra: Labels, staleness: bool
    ) -> None:
        cache, index, shared = src.cache, self._series, src.ts
        seen: set[Series] = set()
        seq: list[Series | None] = []
        for s in batch:
            ck = (s.name, s.labels)
            ser = cache.get(ck)
            if ser is None or index.get(ser.labels) is not ser:
                ser = cache[ck] = self._get(self._key(s, extra), None if shared else shared)
            seq.append(None if ser in seen else ser)
            seen.add(ser)
        grow = not shared or t_ms > shared[-1]
        if grow and shared:
            for ser in cache.values():  # series not written now leave the lockstep before it moves on
                if ser._t is shared and ser not in seen:
                    ser._detach()
        if staleness:
            for old in src.seq:
                if old is not None and old not in seen and index.get(old.labels) is old:
                    old.append(t_ms, STALE)
        for s, ser in zip(batch, seq, strict=True):
            if ser is not None:
                if ser._t is shared:
                    if grow:
                        ser._v.append(s.value)
                else:
                    ser.append(t_ms, s.value)
        if grow:
            shared.append(t_ms)
        src.labels, src.names = list(map(_LABELS, batch)), list(map(_NAME, batch))
        src.seq, src.ndups, src.epoch = seq, len(batch) - len(seen), self._epoch

    def _key(self, s: Sample, extra: Labels) -> Labels:
        merged = dict(s.labels)
        merged.update(extra)
        merged["__name__"] = s.name
        pairs = self._pairs  # one tuple per distinct label pair, shared by every series that has it
        if len(pairs) > 1_000_000:
            pairs.clear()
        return tuple(pairs.setdefault(p, p) for p in sorted(merged.items()))

    def mark_down(self, source: str, t_ms: int) -> None:
        """A failed scrape: every series of the source goes stale, as in Prometheus."""
        src = self._sources.get(source)
        if src is not None:
            shared = src.ts
            grow = not shared or t_ms > shared[-1]
            for ser in src.seq:
                if ser is not None and self._series.get(ser.labels) is ser:
                    if ser._t is not shared:
                        ser.append(t_ms, STALE)
                    elif grow:
                        ser._v.append(NAN)
                        if ser._stale is None:
                            ser._stale = []
                        ser._stale.append(t_ms)
            if grow and shared:
                written = set(src.seq)
                for ser in src.cache.values():  # (series of earlier writes, not in this one)
                    if ser._t is shared and ser not in written:
                        ser._detach()
                shared.append(t_ms)
            src.labels, src.names, src.seq, src.ndups = [], [], [], 0
        self._tick(t_ms)

    def drop_sources(self, sources: set[str], label: str = "instance") -> int:
        """Remove now every series the sources wrote or that carries `label` = one of them (rules' results
        about them); returns how many went. For removed targets: their memory is freed, not left to age out."""
        before = len(self._series)
        for name in sources:
            src = self._sources.pop(name, None) or self._retired.pop(name, None)
            if src is not None:
                for ser in src.cache.values():
                    self._remove(ser)
        for ser in list(self._series.values()):
            for k, v in ser.labels:
                if k == label:
                    if v in sources:
                        self._remove(ser)
                    break
        index = self._series
        for src in (
            *self._sources.values(),
            *self._retired.values(),
        ):  # the rule sources' caches hold them too
            dead = [ck for ck, ser in src.cache.items() if index.get(ser.labels) is not ser]
            for ck in dead:
                del src.cache[ck]
            if dead:
                src.seq = [ser if ser is None or index.get(ser.labels) is ser else None for ser in src.seq]
        gone = before - len(self._series)
        if gone:
            self._epoch += 1  # every source rebuilds its fast path on its next write
            # the removed sources' label pairs (their instance, …) would stay interned, scattered through memory
            # the allocator could otherwise give back; the series left keep their own pairs
            self._pairs = {}
        return gone

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

    def _get(self, key: Labels, ts: array[int] | None = None) -> Series:
        s = self._series.get(key)
        if s is None:
            s = Series(key, ts)
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
        shared = src.ts
        cut = bisect_left(shared, cutoff) if shared and shared[0] < cutoff else 0
        del shared[:cut]
        current = {id(s) for s in src.seq}
        dead = []
        for ck, s in src.cache.items():
            if s._t is not shared:
                s.trim(cutoff)
            elif cut:
                del s._v[:cut]
                if s._stale:
                    del s._stale[: bisect_left(s._stale, cutoff)]
            if id(s) not in current and s.only_stale():  # a series written now is not dead: no call
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
