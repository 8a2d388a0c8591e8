"""The differential scenario: real vLLM recordings trimmed, thinned and time-shifted onto one timeline."""

# Instance `a` is kv_bound, then (after a restart, so every counter resets) healthy; `b` is batch_cap and vanishes
# early (with one failed scrape in its recording); `c` is compute_bound (relabelled model "small") joining late;
# `d` is first scraped mid-ramp (first sample already above zero), which makes rate()'s zero-point clamp bind.
# A committed `tests/fixtures/recordings/**/*restart*` recording, when present, adds instance `r`.

from __future__ import annotations

import gzip
import json
import re
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.openmetrics import Recording, read_frames, to_ms

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / ".." / "shared" / "recordings" / "vllm-0.32-cpu"
FIXTURES = REPO / "tests" / "fixtures" / "recordings"

_MODEL = re.compile(r'model_name="[^"]*"')
GRID_MS = 10_000  # subquery steps used in the expression file divide 10 s: keep samples off that grid
RANGES_S = (0, 10, 20, 30, 60, 90, 120, 150, 180, 240, 300, 330, 360, 420, 600)  # ranges + offsets + lookback
CLEARANCE_MS = 3  # no sample within this distance of a window edge, so 2.x/3.x edge rules cannot differ


@dataclass(frozen=True)
class Segment:
    """A slice of one recording placed on the scenario timeline."""

    source: str
    instance: str
    start: float  # where its first kept scrape lands, in seconds after the scenario base
    every: int = 1  # keep every n-th successful scrape
    skip: int = 0  # drop the first `skip` successful scrapes
    duration: float | None = None  # keep only the first `duration` seconds
    gzip: bool = False  # write the derived recording gzip-compressed
    inject_error: bool = False  # add one failed-scrape line (`"error"`) in the middle
    model_name: str | None = None  # rewrite `model_name="…"` in the expositions (all recordings say "tiny")


DEFAULT_SEGMENTS = (
    Segment("kv_bound.jsonl.gz", "a", 0.0, every=2, gzip=True),
    Segment("healthy.jsonl.gz", "a", 150.0, every=3, duration=60.0),
    Segment("batch_cap.jsonl.gz", "b", 5.0, every=4, inject_error=True),
    Segment("compute_bound.jsonl.gz", "c", 60.0, every=5, model_name="small"),  # served as "tiny"
    Segment("healthy_closed_c2.jsonl.gz", "d", 30.0, every=2, skip=6, duration=90.0),
)
# Seconds after the base: partial windows early, d's first minute (30-90 s), b vanishing (~109 s), d ending
# (~120 s), a's restart (150 s), c ending (~198 s), a ending (~210 s), and past the 5-minute lookback of b (~409 s),
# c (~498 s) and a (~510 s).
EARLY_OFFSETS = (1.5, 7, 20, 33, 38, 45, 52, 59, 66, 75, 85, 100, 108, 113, 125, 130, 145)
RESTART_OFFSETS = (151.5, 153, 156, 165, 180, 200, 215, 240)
LATE_OFFSETS = (-30, 320, 415, 505, 520)  # before any data, then after each target's lookback ran out


@dataclass
class Scenario:
    """Derived recordings (as `load_store` takes them), the timeline's events and the query instants."""

    recordings: list[Recording]
    base: float
    instants: list[float]
    events: dict[str, float] = field(default_factory=dict)
    sample_ms: list[int] = field(default_factory=list)


def find_recording(name: str) -> Path | None:
    """A recording by file name: ../shared's 0.32 set first (the scenario's times come from its labels), then fixtures."""
    for candidate in (SHARED / name, FIXTURES / name, *sorted(FIXTURES.glob(f"*/{name}"))):
        if candidate.is_file():
            return candidate.resolve()
    return None


def restart_segment() -> Segment | None:
    """A committed real-restart recording as instance `r`, if another engineer has added one."""
    found = sorted(FIXTURES.glob("**/*restart*.jsonl*")) if FIXTURES.is_dir() else []
    if not found:
        return None
    n = sum(1 for _ in read_frames(found[0]))
    return Segment(str(found[0].relative_to(FIXTURES)), "r", 20.0, every=max(1, n // 40), duration=240.0)


def _select(path: Path, seg: Segment) -> list[tuple[float, str]]:
    frames = list(read_frames(path))
    if not frames:
        raise ValueError(f"{path}: no successful scrapes")
    kept = frames[seg.skip :: seg.every]
    if seg.model_name is not None:
        kept = [(t, _MODEL.sub(f'model_name="{seg.model_name}"', text)) for t, text in kept]
    if seg.duration is not None:
        kept = [f for f in kept if f[0] - kept[0][0] <= seg.duration]
    return kept


def _shift_for(frames: list[tuple[float, str]], target_s: float) -> float:
    """A shift near `target_s - first` whose samples avoid the subquery grid and round the same either way."""
    base_ms = round(target_s - frames[0][0]) * 1000
    for k in range(200):
        shift_ms = base_ms + 7 * k
        shift = shift_ms / 1000
        ok = True
        for t, _ in frames:
            ms = to_ms(t, shift)
            off = ms % GRID_MS
            if ms != to_ms(t) + shift_ms or min(off, GRID_MS - off) <= CLEARANCE_MS:
                ok = False
                break
        if ok:
            return shift
    raise ValueError("no usable time shift")


def _write(frames: list[tuple[float, str]], out: Path, seg: Segment) -> None:
    lines = [json.dumps({"t": t, "text": text}) for t, text in frames]
    if seg.inject_error and len(frames) > 2:
        mid = len(frames) // 2
        t_err = (frames[mid - 1][0] + frames[mid][0]) / 2
        lines.insert(mid, json.dumps({"t": t_err, "error": "connection refused (injected)"}))
    data = ("\n".join(lines) + "\n").encode()
    out.write_bytes(gzip.compress(data, compresslevel=1) if seg.gzip else data)


def clear_instant(t: float, sample_ms: list[int]) -> float:
    """Nudge t (by 13 ms steps) until no sample sits within CLEARANCE_MS of any window edge t - r."""
    t_ms = round(t * 1000)
    for _ in range(500):
        edges = [t_ms - r * 1000 for r in RANGES_S]
        off = t_ms % GRID_MS
        clear = min(off, GRID_MS - off) > CLEARANCE_MS
        for e in edges:
            i = bisect_left(sample_ms, e - CLEARANCE_MS)
            if i < len(sample_ms) and sample_ms[i] <= e + CLEARANCE_MS:
                clear = False
                break
        if clear:
            return t_ms / 1000
        t_ms += 13
    raise ValueError(f"no clear instant near {t}")


def build_scenario(workdir: Path, segments: tuple[Segment, ...] = DEFAULT_SEGMENTS) -> Scenario:
    """Write the derived recordings into workdir and choose the instants; raises FileNotFoundError if data lacks."""
    segs = list(segments)
    extra = restart_segment()
    if extra is not None:
        segs.append(extra)
    paths = {s.source: find_recording(s.source) or FIXTURES / s.source for s in segs}
    missing = [s.source for s in segs if not paths[s.source].is_file()]
    if missing:
        raise FileNotFoundError(f"recordings not found in {FIXTURES} or {SHARED}: {', '.join(missing)}")
    base = next(iter(read_frames(paths[segs[0].source])))[0]
    scenario = Scenario(recordings=[], base=base, instants=[])
    all_ms: list[int] = []
    for i, seg in enumerate(segs):
        frames = _select(paths[seg.source], seg)
        shift = _shift_for(frames, base + seg.start)
        out = workdir / f"{i:02d}-{seg.instance}-{Path(seg.source).name.split('.')[0]}.jsonl"
        out = out.with_suffix(".jsonl.gz") if seg.gzip else out
        _write(frames, out, seg)
        scenario.recordings.append((str(out), seg.instance, shift))
        ms = [to_ms(t, shift) for t, _ in frames]
        all_ms.extend(ms)
        scenario.events[f"{seg.instance}:{Path(seg.source).name.split('.')[0]}:first"] = ms[0] / 1000
        scenario.events[f"{seg.instance}:{Path(seg.source).name.split('.')[0]}:last"] = ms[-1] / 1000
    scenario.sample_ms = sorted(all_ms)
    offsets = (*EARLY_OFFSETS, *RESTART_OFFSETS, *LATE_OFFSETS)
    scenario.instants = [clear_instant(base + off, scenario.sample_ms) for off in offsets]
    return scenario
