"""Compose real vLLM recordings into one target's timeline (healthy → KV-bound → healthy)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

GAP_S = 1.0  # one missed scrape at each join, as when a server is restarted with new flags


def read_frames(path: Path) -> list[dict]:
    """The {"t", "text"} lines of a recording."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def concat(parts: list[Path], out: Path, start: float | None = None) -> list[tuple[float, float]]:
    """Write parts one after the other in time (counters reset at each join); returns each part's span."""
    spans, frames, t = [], [], start
    for part in parts:
        rows = read_frames(part)
        t = rows[0]["t"] if t is None else t
        shift = t - rows[0]["t"]
        shifted = [{**r, "t": r["t"] + shift} for r in rows]
        spans.append((shifted[0]["t"], shifted[-1]["t"]))
        frames += shifted
        t = shifted[-1]["t"] + GAP_S
    write(frames, out)
    return spans


def write(frames: list[dict], out: Path) -> None:
    """Write frames as a gzipped recording."""
    with gzip.open(out, "wt", encoding="utf-8") as f:
        for r in frames:
            f.write(json.dumps(r) + "\n")


def split(path: Path, at: float, first: Path, second: Path) -> None:
    """Cut a recording at time `at` into two files (a restart of kvdoctor between them)."""
    rows = read_frames(path)
    write([r for r in rows if r["t"] < at], first)
    write([r for r in rows if r["t"] >= at], second)
