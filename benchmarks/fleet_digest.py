"""A digest of what the daemon stores and concludes over a fleet's cycles, to show a change leaves results identical.

usage: python benchmarks/fleet_digest.py [--targets 40] [--cycles 20] [--interval 15] [--retention 180] [-v]

Run it from two checkouts (it imports the one it sits in) and compare the last line. The daemon scrapes real
vLLM 0.32 recordings over HTTP (`ReplayServer`s in this process, each on a clock stepped with the daemon's, so
every run serves the same frames), through its own scrape, parse and cycle path. After every cycle it hashes
every stored series (labels, timestamps, values, stale markers), every diagnosis (verdict, findings, evidence,
advice), each target's scrape health (durations and URLs left out) and the what-if's snapshots. Predictions are left
out: they arrive from a worker thread whenever it finishes, so the advisor is asked for none here. -v prints
each cycle's digest, to find the first that differs.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fleet_data import RECORDINGS, recording_dir  # noqa: E402

from kvdoctor.config.load import load_config  # noqa: E402
from kvdoctor.daemon.runner import Daemon  # noqa: E402
from kvdoctor.replayserver import Playlist, ReplayServer  # noqa: E402
from kvdoctor.rules.loader import default_rule_files, load_files  # noqa: E402
from kvdoctor.verdicts import Diagnosis  # noqa: E402

_VARYING = ("last_scrape_duration_s", "url")  # wall time, and the ports the servers got


class Stepped:
    """A clock moved by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _num(v: object) -> str:
    return "nan" if isinstance(v, float) and math.isnan(v) else repr(v)


def digest(d: Daemon, diagnoses: list[Diagnosis]) -> str:
    """One cycle's hash: the store, the diagnoses, the targets' health and the what-if's snapshots."""
    h = hashlib.sha256()
    store = d.pipeline.store
    for s in sorted(store.select(None), key=lambda s: s.labels):
        h.update(repr(s.labels).encode())
        h.update(" ".join(map(_num, s.ts)).encode())
        h.update(" ".join(map(_num, s.vs)).encode())
    for diag in sorted(diagnoses, key=lambda x: (x.target, x.model_name)):
        h.update(repr(sorted(diag.to_dict().items())).encode())
    for name, target in sorted(d.pipeline.targets.items()):
        shown = {k: v for k, v in target.to_dict().items() if k not in _VARYING}
        h.update(repr((name, sorted(shown.items()), target.missing, target.live)).encode())
        advisor = d.pipeline.advisor
        if advisor is not None:
            h.update(repr(advisor.snaps(name)).encode())
    return h.hexdigest()


def main() -> int:
    """Run the cycles, print the digest."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=40)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--retention", type=float, default=180.0)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    rec = recording_dir()
    served = Stepped(0.0)
    servers = [
        ReplayServer(Playlist([rec / f"{name}.jsonl.gz"], start_offset_s=40, loop=True), clock=served).start()
        for name in RECORDINGS
    ]
    try:
        tmp = Path(tempfile.mkdtemp(prefix="fleet-digest-"))
        cfg_path = tmp / "kvdoctor.yml"
        lines = [f"interval: {args.interval:g}s", f"retention: {args.retention:g}s", "targets:"]
        for i in range(args.targets):
            url = servers[i % len(servers)].url
            lines.append(f"  - {{url: '{url}?i={i}', name: t{i:05d}}}")
        cfg_path.write_text("\n".join(lines) + "\n")
        clock = Stepped(1_700_000_000.0)
        d = Daemon(load_config(str(cfg_path)), load_files(default_rule_files()), str(cfg_path), clock=clock)
        d.pipeline.headroom = None  # predictions arrive when a worker finishes: not part of the digest
        advisor = d.pipeline.advisor
        if advisor is not None:
            advisor.annotate = lambda diagnoses, t: diagnoses  # type: ignore[method-assign]
        total = hashlib.sha256()
        for k in range(args.cycles):
            clock.now += args.interval
            served.now += args.interval
            one = digest(d, d.cycle())
            total.update(one.encode())
            if args.verbose:
                print(f"cycle {k:3d} {one}", flush=True)
        series = len(d.pipeline.store)
        d.shutdown()
    finally:
        for server in servers:
            server.stop()
    print(f"{args.targets} targets, {args.cycles} cycles, {series} series: {total.hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
