"""A recording replayed in a loop without the loop showing: each pass continues the counters from the last one.

A fleet benchmark that replays a 2-minute recording for 15 minutes would otherwise put every target's counters back
to their first value at each pass; the advisor reads that as an engine restart, cuts its history there and never
holds a steady window. Each (frame, pass) is parsed once and shared by every target replaying it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvdoctor.ingest.parse import Parser
from kvdoctor.samples import Sample, Scrape

_CUMULATIVE = ("_total", "_count", "_sum", "_bucket")


def _cumulative(name: str, types: dict[str, str]) -> bool:
    return name.endswith(_CUMULATIVE) or types.get(name) == "counter"


class Looped(Parser):
    """Texts of one recording's frames, each pass of the loop a text of its own whose counters have moved on."""

    def __init__(self, texts: list[str]) -> None:
        super().__init__()
        self._texts = texts
        self._frames = [super(Looped, self).parse(t) for t in texts]
        first, last = self._frames[0], self._frames[-1]
        start = {(s.name, s.labels): s.value for s in first.samples}
        n = len(texts)
        # what one pass adds to each counter, plus one frame's share so the rate runs on across the seam
        self._step = {
            (s.name, s.labels): (s.value - start.get((s.name, s.labels), s.value)) * n / max(1, n - 1)
            for s in last.samples
            if _cumulative(s.name, last.types)
        }
        self._by_id: dict[int, Scrape] = {}
        self._kept: dict[tuple[int, int], Scrape] = {}
        self._keys: dict[tuple[int, int], str] = {}

    def text(self, k: int) -> str:
        """The text of the loop's k-th frame (k counts on past the recording's end)."""
        n = len(self._texts)
        j, lap = k % n, k // n
        key = (j, lap)
        got = self._keys.get(key)
        if got is None:
            got = self._keys[key] = f"{self._texts[j]}\n# pass {lap}\n"
            base = self._frames[j]
            step = self._step
            samples = [
                s
                if (d := step.get((s.name, s.labels))) is None
                else Sample(s.name, s.labels, s.value + lap * d)
                for s in base.samples
            ]
            self._by_id[id(got)] = Scrape(samples, base.types)
        return got

    def parse(
        self, text: str, *args: Any, keep: Callable[[str], bool] | None = None, **kwargs: Any
    ) -> Scrape:
        """The scrape of a text this loop handed out (parsed once, shared by every target), cut by `keep` as the
        parser cuts it (once per text and keep)."""
        got = self._by_id.get(id(text))
        if got is None:
            return super().parse(text, *args, keep=keep, **kwargs)
        if keep is None:
            return got
        key = (id(text), id(keep))
        cut = self._kept.get(key)
        if cut is None:
            names = {s.name for s in got.samples}
            kept = {n for n in names if keep(n)}
            cut = self._kept[key] = Scrape([s for s in got.samples if s.name in kept], got.types)
        return cut
