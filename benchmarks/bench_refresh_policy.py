"""How often the advisor simulates a fleet at a limit: its refresh policy counted on a stepped clock, no CPU noise.

usage: python benchmarks/bench_refresh_policy.py [--targets 300] [--minutes 12] [--interval 5] [--sim-s 0.45]
                                                 [--tree DIR]

The fleet of `bench_fleet_vs_prometheus.py --scenarios limit`: --targets targets on 4 replay servers (compute_bound,
kv_bound, compute_bound, kv_bound from kvdoctor/demo, looped from 40 s in as `replay-server --loop --from 40` does,
so every target restarts when its recording does), each scraped at its own phase of the --interval. Every cycle each
target's diagnosis carries the advice the daemon gives it (a second replica; and fp8 KV for the kv-bound ones), and
a background-mode Advisor (the daemon's) annotates it with `predict` counted instead of run. Its worker is stepped
with the clock: after each cycle it takes queued requests until it has run interval / --sim-s simulations (a
simulation costs ~0.4-0.5 s of CPU in the daemon's child on the team's machine), so what is counted is how often the
policy asks for a simulation and how its queue grows, which the wall-clock benchmark cannot separate from a busy
machine. --tree DIR counts another checkout's policy (e.g. main's; one with `Advisor.work_once`) the same way. Prints the simulations run in each
minute, the total, the advisor's counters (computed, shared, kept), the queue's peak length (follow-ups included),
the effect requests queued (and most in one cycle) while a near window's simulation (same change, fingerprint near)
was queued or running, and the oldest effect shown after the first 3 minutes. A background-mode HeadroomWorker (the
daemon's, every target with a TTFT SLO) is stepped too, its search counted instead of run and its queue served
after each cycle: it prints the searches and shared results, and the headroom requests queued per cycle after the
first 3 minutes (the refresh waves).
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    """Count one tree's simulations over the replayed fleet."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=300)
    ap.add_argument("--minutes", type=float, default=12.0)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument(
        "--sim-s", type=float, default=0.45, help="CPU seconds of one simulation (the worker's budget)"
    )
    ap.add_argument("--tree", default=str(ROOT), help="the checkout whose kvdoctor is counted")
    args = ap.parse_args()
    sys.path.insert(0, args.tree)
    from kvdoctor.ingest.parse import Parser
    from kvdoctor.replayserver import Playlist
    from kvdoctor.verdicts import Advice, Diagnosis, Effect
    from kvdoctor.whatif import advisor as advisor_module
    from kvdoctor.whatif import headroom as headroom_module

    now = [0.0]
    asked: list[float] = []

    def predict(history: Any, window: Any, change: Any, **kwargs: Any) -> float:
        asked.append(now[0])
        return now[0]

    advisor_module.predict = predict  # type: ignore[assignment]
    advisor_module.effect_of = lambda p, change, t: Effect(change, {}, {}, "", t=t)  # type: ignore[assignment]
    headroom_module.search = lambda *a, **k: ({"ttft_p95": 2.0}, 1, 1)  # type: ignore[assignment]
    demo = Path(args.tree) / "kvdoctor" / "demo"
    recs = ("compute_bound", "kv_bound")
    servers = [Playlist([demo / f"{recs[s % 2]}.jsonl.gz"], 40.0, loop=True) for s in range(4)]
    parsed: dict[tuple[int, int], list[Any]] = {}

    def scrape(server: int, at: float) -> list[Any]:
        frame = servers[server].at(at)
        assert frame is not None and frame.text is not None
        key = (server % 2, id(frame))
        if key not in parsed:
            parsed[key] = Parser().parse(frame.text).samples
        return parsed[key]

    replica = Advice("replicas", "add a replica", "signals", {"replicas": 2})
    fp8 = Advice("--kv-cache-dtype", "fp8 KV cache", "signals", {"kv_cache_dtype": "fp8"})
    names = [f"t{i:05d}" for i in range(args.targets)]
    phases = [(zlib.crc32(n.encode()) % 5000) / 5000.0 * args.interval for n in names]
    advisor = advisor_module.Advisor(background=True)
    advisor.worker.threaded = False  # stepped below, on this thread, not a thread of its own
    jobs, queued = advisor._jobs, Queued(advisor)
    headroom = headroom_module.HeadroomWorker(advisor.snaps, background=True, max_queue=4096)
    headroom.worker.threaded = False  # served below, after each cycle
    wants = {n: ({"ttft_p95": 1.0}, None) for n in names}
    waves: list[int] = []  # headroom requests queued by each cycle after the first 3 minutes
    jobs.put = queued.put
    peak, oldest = 0, 0.0
    cpu0 = time.process_time()
    for k in range(int(args.minutes * 60 / args.interval)):
        now[0] = t = k * args.interval
        for i, name in enumerate(names):
            at = t - args.interval + phases[i]
            advisor.observe(name, at, scrape(i % 4, at + 0.3 * (i % 4)))  # servers started 0.3 s apart
        diagnoses = [
            Diagnosis(
                n, "m", t, "compute" if i % 2 == 0 else "kv_cache", 0.0, advice=[replica, fp8][: 1 + i % 2]
            )
            for i, n in enumerate(names)
        ]
        advisor.annotate(diagnoses, t)
        headroom.annotate(diagnoses, t, wants)
        if t >= 180.0:
            waves.append(headroom.stats()["queued"])
        while headroom.work_once(0.0):
            pass
        peak = max(peak, len(jobs))
        if t >= 180.0:
            shown = [t - a.effect.t for d in diagnoses for a in d.advice if a.effect is not None]
            oldest = max(oldest, *shown, 0.0)
        work(advisor, asked, int(args.interval / args.sim_s))
    per_minute = [sum(1 for t in asked if int(t // 60) == m) for m in range(int(args.minutes))]
    print(f"kvdoctor from {advisor_module.__file__}")
    print(f"simulations run, per minute: {per_minute}")
    print(
        f"{len(asked)} simulations in {args.minutes:g} minutes at {args.targets} targets "
        f"({len(asked) / args.minutes:.1f} a minute); counters {advisor.stats()}; "
        f"{time.process_time() - cpu0:.1f} s of CPU here (no simulation run)"
    )
    print(
        f"queue: peak {peak}; {queued.total} effect requests queued (most in one cycle "
        f"{max(queued.by_cycle.values(), default=0)}), {queued.near} of them near one queued or running; "
        f"{queued.followups} follow-ups queued; oldest effect shown after 3 minutes {oldest:.0f} s"
    )
    busy = [n for n in waves if n]
    print(
        f"headroom: {headroom.stats()}; requests queued after 3 minutes: {sum(waves)} in {len(busy)} of "
        f"{len(waves)} cycles, most in one cycle {max(waves, default=0)}"
    )
    return 0


def _is_followup(key: Any) -> bool:
    """A restart's check rather than an effect: a typed Key's followup_of, or (--tree of an older checkout) its
    '__followup__' pseudo-knob."""
    if getattr(key, "followup_of", None) is not None:
        return True
    return bool(key[1]) and key[1][0][0] == "__followup__"


class Queued:
    """The worker queue's put, counting the requests queued while one of a near window (same change) is pending."""

    def __init__(self, advisor: Any) -> None:
        self.advisor, self._put = advisor, advisor._jobs.put
        self.total = self.near = self.followups = 0
        self.by_cycle: dict[float, int] = {}  # effect requests queued by the cycle asking
        # (fp.same, change, draw) → [(fingerprint, key)] of the requests queued
        self._fps: dict[Any, Any] = {}

    def put(self, key: Any, t: float) -> bool:
        """Queue key as the advisor would, counting it."""
        ok = bool(self._put(key, t))
        got = self.advisor._shared._fps.get(key[0])
        follow = _is_followup(key)
        self.followups += ok and follow
        if not ok or got is None or follow:
            return ok
        self.total += 1
        self.by_cycle[t] = self.by_cycle.get(t, 0) + 1
        fp, asked = got[1], key[1:]  # the change (at its draw, where the key has one: a relief's draws apart)
        pending = self.advisor._jobs._pending
        group = [(f, k) for f, k in self._fps.get((fp.same, asked), ()) if k in pending and k != key]
        self.near += any(f.near(fp) for f, _ in group)
        self._fps[(fp.same, asked)] = [*group, (fp, key)]
        return ok


def work(advisor: Any, asked: list[float], budget: int) -> None:
    """The advisor's worker, stepped: what is queued served (`Advisor.work_once`) until budget simulations ran."""
    start = len(asked)
    while len(asked) - start < budget and advisor.work_once(0):
        pass


if __name__ == "__main__":
    sys.exit(main())
