"""How often the advisor simulates a fleet at a limit: its refresh policy counted on a stepped clock, no CPU noise.

usage: python benchmarks/bench_refresh_policy.py [--targets 300] [--minutes 12] [--interval 5] [--tree DIR]

The fleet of `bench_fleet_vs_prometheus.py --scenarios limit`: --targets targets on 4 replay servers (compute_bound,
kv_bound, compute_bound, kv_bound from kvdoctor/demo, looped from 40 s in as `replay-server --loop --from 40` does,
so every target restarts when its recording does), each scraped at its own phase of the --interval. Every cycle each
target's diagnosis carries the advice the daemon gives it (a second replica; and fp8 KV for the kv-bound ones), and a
sync-mode Advisor annotates it with `predict` counted instead of run: what is counted is how often the policy asks
for a simulation (each costs ~0.4-0.5 s of CPU in the daemon's child on the team's machine), which the wall-clock
benchmark cannot separate from a busy machine. --tree DIR counts another checkout's policy (e.g. main's) the same way.
Prints the simulations asked for in each minute, the total, and the advisor's counters (computed, shared, kept).
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
    ap.add_argument("--tree", default=str(ROOT), help="the checkout whose kvdoctor is counted")
    args = ap.parse_args()
    sys.path.insert(0, args.tree)
    from kvdoctor.ingest.parse import Parser
    from kvdoctor.replayserver import Playlist
    from kvdoctor.verdicts import Advice, Diagnosis, Effect
    from kvdoctor.whatif import advisor as advisor_module

    now = [0.0]
    asked: list[float] = []

    def predict(history: Any, window: Any, change: Any, **kwargs: Any) -> float:
        asked.append(now[0])
        return now[0]

    advisor_module.predict = predict  # type: ignore[assignment]
    advisor_module.effect_of = lambda p, change, t: Effect(change, {}, {}, "", t=p)  # type: ignore[assignment]
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
    advisor = advisor_module.Advisor()
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
    per_minute = [sum(1 for t in asked if int(t // 60) == m) for m in range(int(args.minutes))]
    print(f"kvdoctor from {advisor_module.__file__}")
    print(f"simulations asked for, per minute: {per_minute}")
    print(
        f"{len(asked)} simulations in {args.minutes:g} minutes at {args.targets} targets "
        f"({len(asked) / args.minutes:.1f} a minute); counters {advisor.stats()}; "
        f"{time.process_time() - cpu0:.1f} s of CPU here (no simulation run)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
