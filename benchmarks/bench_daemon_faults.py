"""The healthy target's cadence in `kvdoctor serve` beside faulty targets, and the interval after a reload.

usage: python benchmarks/bench_daemon_faults.py [--check]

Three runs of a real `kvdoctor serve` at a 2 s interval, the demo's kv_bound recording as the healthy target:
beside a hanging, a dripping and a refusing target; beside a million-series target; and alone, reloaded to a
1 s interval. Prints the seconds between the healthy target's evaluations (/api/v1/history) in each run.
`--check` exits 1 when a median gap is off its interval by more than 40 % or one gap exceeds 3 intervals,
about the bounds tests/test_faults_daemon.py held before they moved here (its tests assert what happens, not
how fast).
Takes about a minute; not run in CI. Run it on a quiet machine: a loaded one delays cycles.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdoctor.replayserver import Playlist, ReplayServer  # noqa: E402
from tests.faults import FaultServer, refused_url  # noqa: E402
from tests.support.daemon import Serve, gaps  # noqa: E402
from tests.support.wait import until  # noqa: E402

DEMO = ROOT / "kvdoctor" / "demo" / "kv_bound.jsonl.gz"
Run = tuple[str, float, list[float]]  # what the healthy target was beside, the interval, the gaps measured


def _cadence(s: Serve, target: str, cycles: int) -> list[float]:
    """Seconds between the next `cycles` + 1 evaluations of target."""
    since = time.time()

    def enough() -> list[float]:
        points = [t for t in s.history(target) if t >= since]
        return points if len(points) > cycles else []

    return gaps(until(enough, timeout=20 * cycles, step=0.2, what=f"{cycles + 1} evaluations of {target}"))


def _serve(config: str, run: Callable[[Serve], list[Run]]) -> list[Run]:
    with tempfile.TemporaryDirectory() as tmp:
        s = Serve(Path(tmp), config)
        try:
            s.wait_ready()
            return run(s)
        finally:
            s.stop()


def beside_faults(good: str) -> list[Run]:
    """Gaps of the healthy target beside hanging, dripping and refusing targets (default 10 s timeouts)."""
    faults = {m: FaultServer(m) for m in ("hang", "drip")}
    try:
        urls = {"good": good, **{m: f.url for m, f in faults.items()}, "refused": refused_url()}
        targets = "".join(f"  - {{url: '{u}', name: {n}}}\n" for n, u in urls.items())
        config = f"interval: 2s\ntargets:\n{targets}"
        return _serve(config, lambda s: [("hang, drip, refused", 2.0, _cadence(s, "good", 6))])
    finally:
        for f in faults.values():
            f.stop()


def beside_a_million_series(good: str) -> list[Run]:
    """Gaps of the healthy target once a million-series target joins by a reload."""
    million = FaultServer("million")
    one = f"interval: 2s\ntargets:\n  - {{url: '{good}', name: good}}\n"

    def run(s: Serve) -> list[Run]:
        _cadence(s, "good", 2)
        s.write(one + f"  - {{url: '{million.url}', name: million}}\n")
        s.reload()
        return [("a million series", 2.0, _cadence(s, "good", 6))]

    try:
        return _serve(one, run)
    finally:
        million.stop()


def reloaded(good: str) -> list[Run]:
    """Gaps at 2 s, then after a reload to 1 s (from the first short gap on)."""

    def run(s: Serve) -> list[Run]:
        name = good.split("/")[2]
        before = _cadence(s, name, 4)
        s.write(f"interval: 1s\ntargets: ['{good}']\n")
        s.reload()
        until(lambda: (g := gaps(s.history(name))) and g[-1] < 1.5, timeout=20, step=0.2, what="a 1 s gap")
        return [("before the reload", 2.0, before), ("after the reload to 1s", 1.0, _cadence(s, name, 6))]

    return _serve(f"interval: 2s\ntargets: ['{good}']\n", run)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a cadence is off its interval")
    args = ap.parse_args()
    server = ReplayServer(Playlist([DEMO], start_offset_s=40, loop=True)).start()
    try:
        runs = [r for bench in (beside_faults, beside_a_million_series, reloaded) for r in bench(server.url)]
    finally:
        server.stop()
    bad = []
    for what, interval, g in runs:
        median, worst = statistics.median(g), max(g)
        print(f"{what:>24}: interval {interval:g}s, median gap {median:.2f}s, max {worst:.2f}s over {len(g)}")
        if abs(median - interval) > 0.4 * interval or worst > 3 * interval:
            bad.append(what)
    if args.check and bad:
        print("off cadence: " + ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
