"""Run recordings through the pipeline on their own clock."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from kvdoctor.ingest.recording import Frame, ParsedFrame, load_frames
from kvdoctor.pipeline import Cycle, Pipeline
from kvdoctor.query import recording_instance

STALE_S = 300.0  # Prometheus' lookback: a sample older than this is invisible to every rule


def replay(
    pipeline: Pipeline,
    recordings: list[str | Path],
    interval_s: float = 15.0,
    scrape_every_s: float = 0.0,
    on_cycle: Callable[[Cycle], None] | None = None,
    names: Mapping[str, str] | None = None,
    parsed: Mapping[str, list[ParsedFrame]] | None = None,
) -> Iterator[Cycle]:
    """Feed frames in time order and evaluate every interval_s; scrape_every_s > 0 drops frames to that cadence.

    `names` gives recordings (by path as given) their target's name, before their sidecars and file names;
    `parsed`, their frames parsed already (by path as given), which are not read again."""
    frames: list[tuple[float, str, Frame | ParsedFrame]] = []
    for path in recordings:
        name = recording_instance(path, names)
        if name not in pipeline.targets:
            pipeline.add_target(name)
        last = -1e18
        given = (parsed or {}).get(str(path))
        for f in load_frames(path) if given is None else given:
            if scrape_every_s and f.t - last < scrape_every_s - 1e-6:
                continue
            last = f.t
            frames.append((f.t, name, f))
    frames.sort(key=lambda x: x[0])
    if not frames:
        return
    t = frames[0][0]
    i = 0
    end = frames[-1][0]
    while t <= end + 1e-9:
        while i < len(frames) and frames[i][0] <= t:
            _, name, f = frames[i]
            pipeline.observe(name, f.t, f.scrape if isinstance(f, ParsedFrame) else f.text, f.error)
            i += 1
        cycle = pipeline.evaluate(t)
        if on_cycle:
            on_cycle(cycle)
        yield cycle
        t += interval_s
        if 0 < i < len(frames) and t - frames[i - 1][0] > STALE_S and frames[i][0] - t > interval_s:
            # nothing scraped for a lookback: every series is stale until the next frame, so each evaluation between
            # would say the same nothing (recordings made days apart span days); step the clock on its grid instead
            t += math.floor((frames[i][0] - t) / interval_s) * interval_s
