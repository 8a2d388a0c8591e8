"""One series of the store: timestamps and values in typed arrays, Prometheus' lookback and staleness on read."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence

from kvdoctor.samples import Labels

LOOKBACK_MS = 300_000  # Prometheus' default 5-minute lookback for instant selectors
STALE = None  # staleness marker as ingest and the `vs` view spell it (stored as NaN plus its timestamp)
NAN = math.nan


class Series:
    """One series: canonical labels, timestamps (ms) and values in typed arrays; stale markers noted by time."""

    __slots__ = ("_shared", "_stale", "_t", "_v", "labels", "name")

    def __init__(self, labels: Labels, ts: array[int] | None = None) -> None:
        self.labels = labels
        self.name = dict(labels).get("__name__", "")
        # Series a source writes in lockstep share one timestamp array (the source's); the store appends to
        # and trims it once for all of them, and a series that leaves the lockstep gets a copy (_detach).
        self._shared = ts is not None
        self._t = array("q") if ts is None else ts
        self._v = array("d")
        self._stale: list[int] | None = None  # timestamps of stale markers, ascending

    def _detach(self) -> None:
        if self._shared:
            self._t, self._shared = array("q", self._t), False

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
        if self._t and t <= self._t[-1]:
            return
        self._detach()
        self._t.append(t)
        if v is None:
            self._v.append(NAN)
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

    def span(self, start: int, end: int) -> tuple[Sequence[int], Sequence[float]]:
        """window(), as slices of the typed arrays when no stale marker falls in it (what range functions read).

        A range function reads a few of a window's samples; this spares building a list of every one of them.
        """
        ts = self._t
        n = len(ts)
        i = bisect_left(ts, start)
        j = n if n and ts[n - 1] <= end else bisect_right(ts, end)
        stale = self._stale
        if stale:
            k = bisect_left(stale, start)
            if k < len(stale) and stale[k] <= end:
                return self.window(start, end)
        return ts[i:j], self._v[i:j]

    def trim(self, before: int) -> None:
        """Forget samples older than `before`."""
        if not self._t or self._t[0] >= before:
            return
        self._detach()
        self._drop(bisect_left(self._t, before), before)

    def _drop(self, i: int, before: int) -> None:
        del self._t[:i]
        del self._v[:i]
        if self._stale:
            del self._stale[: bisect_left(self._stale, before)]

    def only_stale(self) -> bool:
        """True when nothing but stale markers (or nothing at all) is left."""
        return len(self._t) == len(self._stale or ())


def spans(
    series: Iterable[Series], start: int, end: int
) -> Iterator[tuple[Series, Sequence[int], Sequence[float]]]:
    """Each series with its span(start, end); series written in lockstep share one bisect and one timestamp slice.

    A range function over a target's histogram reads twenty-odd bucket series with one timestamp array: the
    window's bounds and timestamps are found once for them, and only the values are sliced per series.
    """
    shared: array[int] | None = None
    ts: Sequence[int] = ()
    i = j = 0
    for s in series:
        if s._stale:  # a stale marker may fall in the window: span() takes it out
            yield (s, *s.span(start, end))
            continue
        arr = s._t
        if arr is not shared:
            n = len(arr)
            i = bisect_left(arr, start)
            j = n if n and arr[n - 1] <= end else bisect_right(arr, end)
            ts, shared = arr[i:j], arr
        yield s, ts, s._v[i:j]
