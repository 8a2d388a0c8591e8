"""The batch cap vLLM does not export, read from a plateau of running under a queue; and how evenly a data-parallel
server's engines share the load.

A data-parallel server's gauges are kept per engine as well as summed (`window.snapshot`): its engines run one
configuration, so an engine pinned at its cap under its own queue shows the cap even while another has seats free,
where the sum over engines would read the cap as the average of the two.
"""

from __future__ import annotations

import statistics

from kvdoctor.whatif.window import RUNNING, WAITING, Snap, delta, engine_ids, per_engine, waiting_for_capacity

# waiting > 0 in at least this share of scrapes (the pack's batch-cap test)
PERSISTENT_QUEUE = 0.75
# or a stretch of scrapes this long, each with requests waiting: a rising load that reached the cap late in the window
HELD_STRETCH_S = 20.0
HELD_STRETCH_SCRAPES = 5
# an engine carrying this many times another's requests, and at least UNEVEN_BY more, is not an even share
UNEVEN_RATIO = 2.0
UNEVEN_BY = 2.0
MAX_SHARED = 8  # engines simulated one by one at most; a server (or a target claiming) more is split evenly


def plateau(snaps: list[Snap], engines: int = 1) -> int | None:
    """The batch cap when running held at its peak under a persistent queue with KV to spare, per engine: over the
    window, or over its longest stretch with requests waiting (HELD_STRETCH_S at least)."""
    kv = [s.get("kv", 0.0) for s in snaps]
    if max(kv) >= 0.8 or delta(snaps[0], snaps[-1], "vllm:num_preemptions_total") > 0:
        return None
    ids = engine_ids(snaps[-1])
    times = [s.t for s in snaps]
    if len(ids) > 1:  # any engine held at its cap by its own queue shows the cap all of them run with
        found = [
            cap
            for e in ids
            if (
                cap := _held_or_stretch(
                    times,
                    [per_engine(s, RUNNING, e) for s in snaps],
                    [per_engine(s, WAITING, e) for s in snaps],
                )
            )
        ]
        return max(found) if found else None
    cap = _held_or_stretch(
        times, [s.get(RUNNING, 0.0) for s in snaps], [waiting_for_capacity(s) for s in snaps]
    )
    return round(cap / engines) if cap else None


def _held_or_stretch(times: list[float], running: list[float], waiting: list[float]) -> int | None:
    held = _held(running, waiting)
    if held:
        return held
    lo, hi = _longest_queue(waiting)
    if hi - lo < HELD_STRETCH_SCRAPES or times[hi - 1] - times[lo] < HELD_STRETCH_S:
        return None
    stretch = running[lo:hi]
    # the batch that stretch held is the window's largest: a cap is never below a batch the engine ran
    return _held(stretch, waiting[lo:hi]) if max(stretch) >= max(running) else None


def _longest_queue(waiting: list[float]) -> tuple[int, int]:
    """[lo, hi) of the longest run of scrapes with requests waiting."""
    best, start = (0, 0), None
    for i, w in enumerate([*waiting, 0.0]):
        if w > 0 and start is None:
            start = i
        elif w <= 0 and start is not None:
            best = max(best, (start, i), key=lambda r: r[1] - r[0])
            start = None
    return best


def _held(running: list[float], waiting: list[float]) -> int | None:
    top = max(running)
    if top <= 0:
        return None
    # the pack's test (kvdoctor:engine_batch_cap:plateau): the typical batch at the peak, or near it on average; a
    # small cap reads one below its peak in many scrapes, as a finished request's slot waits a step to refill
    held = statistics.median(running) >= 0.9 * top or statistics.fmean(running) >= 0.85 * top
    queued = sum(1 for w in waiting if w > 0) / len(waiting)
    return round(top) if held and queued >= PERSISTENT_QUEUE else None


def uneven(snaps: list[Snap]) -> str | None:
    """How unevenly a data-parallel server's engines carried the requests, in words; None when evenly."""
    load = _loads(snaps)
    if not _uneven(load):
        return None
    shares = ", ".join(f"engine {e} {v:.3g}" for e, v in load.items())
    how = (
        "each engine is simulated with its share of the load, as a router that pins requests to engines keeps them"
        if len(load) <= MAX_SHARED
        else f"the simulation splits the load evenly (more than {MAX_SHARED} engines are not simulated one by one)"
    )
    return f"the engines carried the requests unevenly (running + waiting on average: {shares}): {how}"


def load_shares(snaps: list[Snap]) -> tuple[float, ...]:
    """Each engine's share of the requests in flight where a data-parallel server's engines carried them unevenly
    (an engine UNEVEN_RATIO times another's, and UNEVEN_BY more); empty where they shared them evenly, or where
    there are more than MAX_SHARED engines (each share is a simulation of its own)."""
    load = _loads(snaps)
    if not _uneven(load) or len(load) > MAX_SHARED:
        return ()
    total = sum(load.values())
    return tuple(v / total for v in load.values())


def busiest(snaps: list[Snap]) -> tuple[float, float] | None:
    """The running and waiting (means) of the engine that carried the most requests, where the engines carried
    them unevenly: what the pack judges such a server's limit on. None where they shared them evenly."""
    load = _loads(snaps)
    if not _uneven(load):
        return None
    e = max(load, key=lambda k: load[k])
    return (
        statistics.fmean(per_engine(s, RUNNING, e) for s in snaps),
        statistics.fmean(per_engine(s, WAITING, e) for s in snaps),
    )


def _uneven(load: dict[str, float]) -> bool:
    if len(load) < 2:
        return False
    most, least = max(load.values()), min(load.values())
    return most >= UNEVEN_RATIO * least and most - least >= UNEVEN_BY


def _loads(snaps: list[Snap]) -> dict[str, float]:
    ids = engine_ids(snaps[-1])
    if len(ids) < 2:  # one engine (every look of most targets asks): nothing to compare, no means to take
        return {}
    return {
        e: statistics.fmean(per_engine(s, RUNNING, e) + per_engine(s, WAITING, e) for s in snaps) for e in ids
    }
