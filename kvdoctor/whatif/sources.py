"""Snapshots from a recording or a Prometheus range query, and the stretch of them a what-if learns from."""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from pathlib import Path

from kvdoctor.ingest.recording import ParsedFrame, RecordingError, parse_frames
from kvdoctor.samples import Sample
from kvdoctor.whatif.breaks import restarts, stalls
from kvdoctor.whatif.window import Snap, in_flight, snapshot
from kvdoctor.whatif.workload import WindowError

MAX_WINDOW_S = 300.0
RAMP_S = 5.0  # scrapes skipped after the load level changes, while the queue fills
# a level held for less than this is a burst of a bursty load, not a level: a recording's default window is then
# its whole busy period
MIN_LEVEL_S = 30.0
IDLE_GAP_S = 10.0  # … which starts after the last idle stretch this long


def recording_snaps(path: str | Path, frames: list[ParsedFrame] | None = None) -> list[Snap]:
    """Every successful scrape of a recording (its frames, when parsed already) as a Snap; raises
    RecordingError naming the file."""
    frames = parse_frames(path) if frames is None else frames
    out: list[Snap] = []
    for f in frames:
        if f.scrape is None:
            continue
        snap = snapshot(f.t, f.scrape.samples)
        # its 38 labels rarely change: one dict, compared by identity after
        if out and snap.info == out[-1].info:
            snap.info = out[-1].info
        out.append(snap)
    if not out:
        raise RecordingError(f"{path}: no successful scrape in the recording")
    return out


def matrix_snaps(series: list[tuple[dict[str, str], list[tuple[float, float]]]]) -> list[Snap]:
    """Snapshots from a range query's matrix (one series per label set, `__name__` among the labels)."""
    by_t: dict[float, list[Sample]] = defaultdict(list)
    for labels, values in series:
        name = labels.get("__name__", "")
        rest = tuple(sorted((k, v) for k, v in labels.items() if k not in ("__name__", "instance", "job")))
        for t, v in values:
            by_t[round(t, 3)].append(Sample(name, rest, v))
    return [snapshot(t, by_t[t]) for t in sorted(by_t)]


def parse_window(text: str, snaps: list[Snap]) -> tuple[float, float]:
    """FROM:TO in seconds from the first scrape (either side may be empty) → absolute times."""
    start = snaps[0].t
    a, sep, b = text.partition(":")
    try:
        lo = start + float(a) if a.strip() else snaps[0].t
        hi = start + float(b) if b.strip() else snaps[-1].t
    except ValueError:
        raise WindowError(
            f"--window {text!r}: expected FROM:TO in seconds from the recording's start"
        ) from None
    if not sep or hi <= lo:
        raise WindowError(f"--window {text!r}: expected FROM:TO with FROM < TO, e.g. 60:180")
    return lo, hi


def default_window(snaps: list[Snap], busy_period: bool = False) -> tuple[float, float]:
    """The last steady stretch of load: idle tail, drain and stalls cut, back to where running + waiting changed
    level or the engine last restarted; with busy_period, a level held under MIN_LEVEL_S (a bursty load) gives way
    to the whole busy period it ends (what a user asking of a recording learns from, where the daemon waits)."""
    level = [in_flight(s) for s in snaps]
    i = len(level) - 1
    while i > 0 and level[i] <= 0:
        i -= 1
    while i > 10 and max(level[i - 10 : i]) >= 5 and level[i] < 0.75 * max(level[i - 10 : i]):
        i -= 1  # draining: the queue empties once the clients stop
    # a stall is no load to learn from: the window ends where one began, or starts where the last one ended when
    # what ran since is long enough to be a level of its own
    since = 0
    for a, b in reversed(stalls(snaps)):
        if a >= i:
            continue
        if b > i or snaps[i].t - snaps[b].t < MIN_LEVEL_S + RAMP_S:
            i = a
        else:
            since = b
            break
    smooth = [statistics.fmean(level[max(0, k - 4) : k + 1]) for k in range(len(level))]
    anchor = statistics.median(level[max(0, i - 5) : i + 1])
    tol = max(0.3 * anchor, 2.0 + 2.0 * anchor**0.5)  # a light open loop's level is noise around a few
    # a stretch that held its level across a restart is two configurations: the one that runs at its end
    first = max([since, *(c for c in restarts(snaps) if c <= i)])
    j = i
    while j > first and abs(smooth[j - 1] - anchor) <= tol and snaps[i].t - snaps[j - 1].t < MAX_WINDOW_S:
        j -= 1
    if busy_period and snaps[i].t - snaps[j].t < MIN_LEVEL_S + RAMP_S:
        j = _busy_since(snaps, level, i, first)
    lo = min(snaps[j].t + RAMP_S, snaps[i].t)
    return lo, snaps[i].t


def _busy_since(snaps: list[Snap], level: list[float], i: int, first: int) -> int:
    """Where the busy period ending at i began: after the last idle stretch of IDLE_GAP_S, a restart, or
    MAX_WINDOW_S back."""
    j = start = i
    while j > first and snaps[i].t - snaps[j - 1].t < MAX_WINDOW_S:
        j -= 1
        if level[j] > 0:
            start = j
        elif snaps[start].t - snaps[j].t >= IDLE_GAP_S:
            break
    return start


def history_before(snaps: list[Snap], lo: float, hi: float) -> tuple[list[Snap], list[Snap]]:
    """(history of the same engine up to hi, the window [lo, hi]); raises WindowError if it spans a restart."""
    cuts = [0, *restarts(snaps), len(snaps)]
    for a, b in itertools.pairwise(cuts):
        run = snaps[a:b]
        window = [s for s in run if lo - 1e-6 <= s.t <= hi + 1e-6]
        if window:
            if len(window) != sum(1 for s in snaps if lo - 1e-6 <= s.t <= hi + 1e-6):
                raise WindowError("the window spans an engine restart (a new configuration): pick one side")
            return [s for s in run if s.t <= hi + 1e-6], window
    raise WindowError("no scrape inside the window")
