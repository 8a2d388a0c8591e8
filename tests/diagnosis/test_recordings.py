"""On every labelled window of real vLLM recordings, the diagnosis carries the labelled class.

Run at the recordings' own 1 s cadence and thinned to a 15 s scrape interval, the interval operators run at.
Optional label keys: `findings` (each must fire in the window; `stalled` and `engine_imbalance` on no recording
that does not list them) and `load_start`/`load_end` (the class begins / ends within a minute of them).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import NamedTuple

import pytest

from kvdoctor.ingest.recording import load_frames
from kvdoctor.pipeline import IDLE_AFTER_S
from tests.conftest import HELD_OUT_MISSES, labelled_windows, window_id
from tests.support.replays import replayed
from tests.support.timeline import LIMITS, WITHIN_S, Timeline, onset_s, resolution_s, timeline

WINDOWS = labelled_windows()
CADENCES = pytest.mark.parametrize("cadence", [0.0, 15.0], ids=["native", "scrape15s"])
EXCLUSIVE = ("stalled", "engine_imbalance")  # findings that must fire only where a label says so
WINDOW_S = (
    15.0  # a verdict needs two scrapes at least this far apart (rules/kvdoctor.yml, kvdoctor:window:ready)
)
IDS = [window_id(w) for w in WINDOWS]


@cache  # every test function here walks all recordings at both cadences: one timeline each
def _replay(path: Path, cadence: float) -> Timeline:
    return timeline(replayed(path, cadence))


class Scrape(NamedTuple):
    """A recorded frame as judged here: its time, and whether it shows the engine's gauges."""

    t: float
    gauges: bool


@cache  # read once per recording (not per window and cadence), and only what is judged: not the texts
def _scrapes(path: Path) -> list[Scrape]:
    return [
        Scrape(f.t, f.text is not None and "vllm:num_requests_running{" in f.text) for f in load_frames(path)
    ]


def _kept(frames: list[Scrape], cadence: float) -> list[Scrape]:
    """The frames replay() feeds at this cadence."""
    out, last = [], -1e18
    for f in frames:
        if not cadence or f.t - last >= cadence - 1e-6:
            out.append(f)
            last = f.t
    return out


def _starts(frames: list[Scrape]) -> list[float]:
    """When the engine's gauges (re)appear: the first scrape, after a failed one, or V0's first stats log."""
    out, seen = [], False
    for f in frames:
        if f.gauges and not seen:
            out.append(f.t)
        seen = f.gauges
    return out


def _judged(entry: dict, cadence: float) -> Timeline:
    # Right after the gauges (re)appear there is no window yet and kvdoctor says `unknown` (idle needs two scrapes):
    # those evaluations are not judged here; test_no_verdict_from_one_scrape checks them.
    frames = _scrapes(entry["path"])
    step = max(cadence, 1.0)
    warm = 2 * step if entry["expected"] == "idle" else max(2 * cadence, WINDOW_S + step)
    starts = [frames[0].t, *_starts(frames)]
    # idle begins idle_after past the last traffic (the window's load_start), seen within a scrape and a cycle
    idle_from = (
        entry.get("load_start", -1e18) + IDLE_AFTER_S + step + 5.0 if entry["expected"] == "idle" else -1e18
    )
    return [
        (t, cls, found)
        for t, cls, found in _replay(entry["path"], cadence)
        if max(entry["steady_from"], idle_from) - 0.5 <= t <= entry["steady_to"] + 0.5
        and not any(0 <= t - s < warm + 0.5 for s in starts)
    ]


def _held_out_miss(entry: dict, cadence: str):
    why = HELD_OUT_MISSES.get((window_id(entry), cadence))
    return [pytest.mark.xfail(strict=True, reason=why)] if why else []


@pytest.mark.parametrize(
    ("entry", "cadence"),
    [
        pytest.param(w, c, id=f"{i}-{cid}", marks=_held_out_miss(w, cid))
        for w, i in zip(WINDOWS, IDS, strict=True)
        for c, cid in ((0.0, "native"), (15.0, "scrape15s"))
    ],
)
def test_labelled_window_gets_its_class(entry, cadence):
    got = [cls for _, cls, _ in _judged(entry, cadence)]
    if not got:
        pytest.skip("window shorter than one evaluation at this cadence")
    share = got.count(entry["expected"]) / len(got)
    assert share >= 0.9, f"{entry['expected']}: {share:.0%} of {got}"
    if entry["expected"] in ("healthy", "idle"):
        assert not LIMITS & set(got), got


LABELLED_FINDINGS = [w for w in WINDOWS if w.get("findings")]


@CADENCES
@pytest.mark.parametrize("entry", LABELLED_FINDINGS, ids=[IDS[WINDOWS.index(w)] for w in LABELLED_FINDINGS])
def test_labelled_findings_fire_in_their_window(entry, cadence):
    got = _judged(entry, cadence)
    if not got:
        pytest.skip("window shorter than one evaluation at this cadence")
    fired = set().union(*(found for _, _, found in got))
    assert set(entry["findings"]) <= fired, (entry["findings"], fired)


RECORDINGS = sorted({w["path"] for w in WINDOWS})


@CADENCES
@pytest.mark.parametrize("path", RECORDINGS, ids=[f"{p.parent.name}/{p.name}" for p in RECORDINGS])
def test_stall_and_imbalance_fire_only_where_labelled(path, cadence):
    allowed = {f for w in WINDOWS if w["path"] == path for f in w.get("findings", ())}
    for t, _, found in _replay(path, cadence):
        assert not (found & set(EXCLUSIVE)) - allowed, (t, found)


TIMED = [w for w in WINDOWS if "load_start" in w or "load_end" in w]


@CADENCES
@pytest.mark.parametrize("entry", TIMED, ids=[IDS[WINDOWS.index(w)] for w in TIMED])
def test_class_begins_and_ends_within_a_minute_of_the_load(entry, cadence):
    tl = _replay(entry["path"], cadence)
    if "load_start" in entry:
        on = onset_s(tl, entry["expected"], entry["load_start"])
        assert on is not None and on <= WITHIN_S, f"{entry['expected']} began {on} s after the load"
    later = [
        w["load_start"]
        for w in WINDOWS
        if w["path"] == entry["path"] and "load_start" in w and w is not entry
    ]
    later = [t for t in later if t >= entry.get("load_end", 0) - 1]
    until = min(later, default=None)
    chained = (
        until is not None and until - entry.get("load_end", 0) < WITHIN_S
    )  # the next phase's onset decides
    if "load_end" in entry and entry["expected"] != "idle" and not chained:
        off = resolution_s(tl, entry["expected"], entry["load_end"], until)
        horizon = (until or tl[-1][0]) - entry["load_end"]
        if off is None and horizon < WITHIN_S:
            pytest.skip(f"the recording ends {horizon:.0f} s after the load, still {entry['expected']}")
        assert off is not None and off <= WITHIN_S, f"{entry['expected']} ended {off} s after the load"


@CADENCES
@pytest.mark.parametrize("path", RECORDINGS, ids=[f"{p.parent.name}/{p.name}" for p in RECORDINGS])
def test_no_verdict_from_one_scrape(path, cadence):
    """One scrape since the gauges (re)appeared: `unknown`; before a 15 s window: nothing but unknown or idle."""
    frames = _kept(_scrapes(path), cadence)
    scrapes = [f.t for f in frames if f.gauges]
    judged = 0
    for start in _starts(frames):
        prev = [s for s in scrapes if s < start]
        if prev and start - prev[-1] < 60:
            continue  # a short outage: the window still holds scrapes from before it
        for t, cls, _ in _replay(path, cadence):
            seen = [s for s in scrapes if start <= s <= t]
            if t < start or not seen or seen[-1] - seen[0] >= WINDOW_S - 0.5:
                continue
            judged += 1
            assert cls in ("unknown", "idle"), (t - start, cls)
            if len(seen) == 1:
                assert cls == "unknown", (t - start, cls)
    if not judged:
        pytest.skip("no evaluation before the window at this cadence")


def test_there_are_labelled_windows_of_every_class():
    if not WINDOWS:
        pytest.skip("no recordings available")
    assert {"idle", "healthy", "kv_cache", "batch_cap", "compute"} <= {w["expected"] for w in WINDOWS}
