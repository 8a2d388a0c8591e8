"""Resident memory per target of the scrape source once its windows are full (run by bench_fleet.py, one process a size).

usage: python benchmarks/fleet_rss.py N [--retention 1800] [--interval 15] [--pre-parsed] [--eval-every 1]

N targets, each a copy of one of the real vLLM 0.32 recordings (bench_fleet's fleet), are fed one scrape every
--interval seconds for --retention seconds plus one interval (the recordings' frames at that spacing, looped), and
the whole rule pack is evaluated after every round (every --eval-every rounds: recorded series then hold fewer
samples), so raw and recorded series both hold a full retention. Prints
one JSON line: RSS before and after (after gc.collect()), series and samples held, and wall seconds.
With --pre-parsed, each template frame is parsed once and every target replays that parse (quicker, but the
targets then share label tuples and parser caches, about 0.1 MB a target not counted); otherwise every scrape is
parsed by the target's own parser, as in the daemon.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fleet_data import RECORDINGS, Template, fleet, recording_dir  # noqa: E402

from kvdoctor.ingest.parse import Parser  # noqa: E402
from kvdoctor.pipeline import Pipeline  # noqa: E402
from kvdoctor.rules.loader import default_rule_files, load_files  # noqa: E402
from kvdoctor.samples import Scrape  # noqa: E402


def rss_bytes() -> int:
    """Current resident set size of this process."""
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Replayed(Parser):
    """A parser that hands back the one parse of each template frame (--pre-parsed)."""

    def __init__(self, done: dict[int, Scrape]) -> None:
        super().__init__()
        self._done = done

    def parse(self, text: str) -> Scrape:
        """The scrape of text, parsed on first sight only."""
        scrape = self._done.get(id(text))
        if scrape is None:
            scrape = self._done[id(text)] = super().parse(text)
        return scrape


def main() -> int:
    """Fill the windows and print the measurement."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int)
    ap.add_argument("--retention", type=float, default=1800.0)
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--pre-parsed", action="store_true")
    ap.add_argument("--eval-every", type=int, default=1, help="evaluate the pack every this many rounds")
    args = ap.parse_args()
    src = recording_dir()
    templates = [Template(src / f"{r}.jsonl.gz", 1e9, args.interval, set()) for r in RECORDINGS]
    targets = fleet(args.n)
    done: dict[int, Scrape] = {}
    if args.pre_parsed:
        for tpl in templates:
            for text in tpl.texts:
                Replayed(done).parse(text)
    gc.collect()
    before = rss_bytes()
    pipeline = Pipeline(load_files(default_rule_files()), retention_s=args.retention)
    for instance, _, _ in targets:
        pipeline.add_target(instance)
        if args.pre_parsed:
            pipeline._parsers[instance] = Replayed(done)
    rounds = int(args.retention / args.interval) + 1
    t0 = float(int(time.time()) - 86400)
    start = time.perf_counter()
    for k in range(rounds):
        t = t0 + k * args.interval
        for instance, ti, phase in targets:
            tpl = templates[ti]
            pipeline.observe(instance, t + phase, tpl.texts[k % len(tpl.texts)])
        if k % args.eval_every == 0 or k == rounds - 1:
            pipeline.evaluate(t + 1.0)
    wall = time.perf_counter() - start
    gc.collect()
    after = rss_bytes()
    series = list(pipeline.store.select(None))
    print(
        json.dumps(
            {
                "targets": args.n,
                "rss_before": before,
                "rss_after": after,
                "rounds": rounds,
                "series": len(series),
                "samples": sum(len(s.ts) for s in series),
                "wall_s": wall,
                "pre_parsed": args.pre_parsed,
                "eval_every": args.eval_every,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
