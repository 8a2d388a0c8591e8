"""The daemon's memory and cycle time at fleet size, on real HTTP scrapes: RSS over time, then a reload to a few.

usage: python benchmarks/fleet_http_rss.py [--targets 300] [--interval 15] [--retention 180] [--cycles 40]
                                           [--reload-to 10] [--after 16] [--servers 4] [--realtime]
                                           [--speed X]

`kvdoctor replay-server --loop` processes serve real vLLM 0.32 expositions (many targets per process, `?i=` URLs);
an in-process `Daemon` watches --targets of them with the given interval and retention. Each cycle scrapes every
target over HTTP, parses, ingests and evaluates the whole rule pack, as `kvdoctor serve` does. By default the
daemon's clock is stepped by one interval per cycle, so the retention fills in minutes of CPU, not of waiting
(the servers play at interval/step speed so counters move as they would); --realtime runs the daemon's own
schedules on the wall clock instead (slow: --cycles × --interval seconds). After --cycles cycles the config is
reloaded to --reload-to targets and --after more cycles run. Prints one line per cycle (RSS after gc, cycle
seconds and CPU seconds, CPU ms per target, series in the store, Python objects alive) and a summary: RSS growth
over the second half of the full-fleet run (flat means bounded by the retention), the slowest cycle against the
interval, the median cycle's wall and CPU per target (with the CPU split by thread: the cycle thread's ingest and
evaluation, the scrape loop's HTTP, the parse worker), and RSS after the reload. The line starting `SUMMARY` says
it in one place: how many full-fleet cycles ran past the interval, and CPU ms per target-cycle by thread (cycle,
parse, scrape, what-if: its worker and the threads that pickle its work for the simulation child).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fleet_data import RECORDINGS, recording_dir  # noqa: E402

from kvdoctor.config.load import load_config  # noqa: E402
from kvdoctor.daemon.runner import Daemon  # noqa: E402
from kvdoctor.promql.values import _GROUPINGS, _MEMOS  # noqa: E402
from kvdoctor.rules.loader import default_rule_files, load_files  # noqa: E402
from kvdoctor.whatif.offload import shared  # noqa: E402


def rss_mb(pid: int | str = "self") -> float:
    """Resident set size of this process (or pid), MB."""
    with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def free_port() -> int:
    """A TCP port free now on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(port: int, deadline_s: float = 180.0) -> None:
    """Block until a replay server answers a TCP connect."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class StepClock:
    """The daemon's wall clock, moved by hand one interval per cycle."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread of this process, by thread name with pool numbers dropped."""
    out: dict[str, float] = {}
    for t in threading.enumerate():
        if t.ident is None:
            continue
        try:
            used = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except OSError:  # ended in between
            continue
        name = t.name.rstrip("0123456789").rstrip("_")
        out[name] = out.get(name, 0.0) + used
    return out


# what each thread is for; the process pool's feeder and manager threads pickle the what-if's work for its child
ROLES = {
    "MainThread": "cycle",  # stepped: Daemon.cycle runs here (ingest, evaluation, publishing)
    "kvdoctor-cycle": "cycle",
    "kvdoctor-parse": "parse",
    "kvdoctor-scrape": "scrape",
    "kvdoctor-whatif": "what-if",
    "kvdoctor-headroom": "what-if",
    "QueueFeederThread": "what-if",
    "Thread-": "what-if",
}


def write_config(path: Path, ports: list[int], n: int, interval: float, retention: float) -> None:
    """A kvdoctor.yml watching n targets spread over the servers."""
    lines = [f"interval: {interval:g}s", f"retention: {retention:g}s", "targets:"]
    for i in range(n):
        lines.append(f"  - {{url: 'http://127.0.0.1:{ports[i % len(ports)]}/metrics?i={i}', name: t{i:05d}}}")
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    """Run the fleet, print the curve and the summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=300)
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--retention", type=float, default=180.0)
    ap.add_argument("--cycles", type=int, default=40)
    ap.add_argument("--reload-to", type=int, default=10)
    ap.add_argument("--after", type=int, default=16)
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--realtime", action="store_true")
    ap.add_argument(
        "--speed",
        type=float,
        help="replay speed (default: 1 realtime, else the interval; at 2,000 "
        "targets a stepped cycle takes seconds, so about interval / cycle seconds)",
    )
    args = ap.parse_args()
    rec = recording_dir()
    ports = [free_port() for _ in range(args.servers)]
    # stepped: one cycle of CPU stands for one interval, about a second at these sizes; play that much faster
    speed = args.speed or (1.0 if args.realtime else args.interval)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kvdoctor",
                "replay-server",
                str(rec / f"{RECORDINGS[i % len(RECORDINGS)]}.jsonl.gz"),
                "--loop",
                "--from",
                "40",
                "--speed",
                f"{speed:g}",
                "--listen",
                f"127.0.0.1:{p}",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i, p in enumerate(ports)
    ]
    rows: list[tuple[str, int, float, float, float, int, int]] = []
    try:
        for p in ports:
            wait_up(p)
        tmp = Path(tempfile.mkdtemp(prefix="fleet-http-rss-"))
        cfg_path = tmp / "kvdoctor.yml"
        write_config(cfg_path, ports, args.targets, args.interval, args.retention)
        clock = StepClock()
        cfg = load_config(str(cfg_path))
        d = Daemon(
            cfg, load_files(default_rule_files()), str(cfg_path), clock=time.time if args.realtime else clock
        )
        if args.realtime:
            d.start(web=False)
        start_rss = rss_mb()
        print(
            f"{args.targets} targets on {args.servers} replay servers, interval {args.interval:g}s, retention "
            f"{args.retention:g}s, {'realtime' if args.realtime else 'stepped clock'}; start RSS {start_rss:.0f} MB"
        )
        print(
            f"{'phase':7s} {'cycle':>5s} {'t(s)':>6s} {'rss MB':>7s} {'cycle s':>8s} {'cpu s':>7s} "
            f"{'ms/target':>9s} {'series':>8s} {'py blocks':>10s} {'down':>5s}"
        )
        cpus: list[float] = []  # CPU of the cycle: every thread of this process (scrapes, parses, evaluation)
        by_thread: list[dict[str, float]] = []  # the same, per thread
        downs: list[int] = []  # targets whose last scrape failed, after each cycle

        def one(phase: str, k: int) -> None:
            if args.realtime:
                time.sleep(args.interval)  # a benchmark on the wall clock: the daemon's own schedule runs
                dur = float(d.state.snapshot().get("cycle_duration_s") or 0.0)
                cpu = math.nan  # the cycle thread ran on its own schedule, beside this one
            else:
                clock.now += args.interval
                t0, c0, th0 = time.monotonic(), time.process_time(), thread_cpu()
                d.cycle()
                dur, cpu, th1 = time.monotonic() - t0, time.process_time() - c0, thread_cpu()
                by_thread.append({k: v - th0.get(k, 0.0) for k, v in th1.items()})
            gc.collect()
            blocks = sys.getallocatedblocks()  # Python objects alive, apart from what the allocator keeps
            row = (phase, k, k * args.interval, rss_mb(), dur, len(d.pipeline.store), blocks)
            rows.append(row)
            cpus.append(cpu)
            downs.append(sum(not t.up for t in d.pipeline.targets.values()))  # failed scrapes cost less
            targets = args.targets if phase == "fleet" else args.reload_to
            print(
                f"{row[0]:7s} {row[1]:5d} {row[2]:6.0f} {row[3]:7.0f} {row[4]:8.2f} {cpus[-1]:7.2f} "
                f"{cpus[-1] / targets * 1e3:9.2f} {row[5]:8d} {blocks:10d} {downs[-1]:5d}",
                flush=True,
            )

        for k in range(args.cycles):
            one("fleet", k)
        write_config(cfg_path, ports, args.reload_to, args.interval, args.retention)
        memo = sum(len(g) for g in (*_GROUPINGS.values(), *_MEMOS))  # label sets the evaluator's memos hold
        t0 = time.monotonic()
        ok, message = d.reload()
        print(
            f"reload to {args.reload_to} targets: {ok} in {time.monotonic() - t0:.2f}s ({message[:80]}); "
            f"evaluator memo {memo} label sets before"
        )
        for k in range(args.cycles, args.cycles + args.after):
            one("reload", k)
        child_pids = shared().pids()
        d.shutdown()
    finally:
        for proc in procs:
            proc.terminate()
    fleet = [r for r in rows if r[0] == "fleet"]
    filled = [r for r in fleet if r[2] >= args.retention + 2 * args.interval]
    half = filled[len(filled) // 2 :] or fleet[-2:]
    growth = half[-1][3] - half[0][3]
    per_min = growth / max(1e-9, (half[-1][2] - half[0][2]) / 60)
    slowest = max(r[4] for r in fleet[1:]) if len(fleet) > 1 else fleet[0][4]
    after = [r for r in rows if r[0] == "reload"]
    print(
        f"RSS after the retention filled: {half[0][3]:.0f} -> {half[-1][3]:.0f} MB ({per_min:+.1f} MB per "
        f"simulated minute); slowest cycle {slowest:.2f}s of the {args.interval:g}s interval"
    )
    over = sum(1 for r in fleet[1:] if r[4] > args.interval)
    full = [c for r, c in zip(rows, cpus, strict=True) if r[0] == "fleet"][1:]
    if full and not args.realtime:
        med = statistics.median(full)
        walls = [r[4] for r in fleet[1:]] or [fleet[0][4]]
        wall = statistics.median(walls)
        print(
            f"full-fleet cycles after the first: wall median {wall:.2f}s ({wall / args.targets * 1e3:.2f} ms per "
            f"target), CPU median {med:.2f}s = {med / args.targets * 1e3:.2f} ms per target-cycle (this process, "
            f"all threads); PYTHONMALLOC={os.environ.get('PYTHONMALLOC', '(pymalloc)')}"
        )
        split = by_thread[1 : len(fleet)]
        names = sorted(
            {k for row in split for k in row}, key=lambda k: -statistics.median(r.get(k, 0) for r in split)
        )
        print(
            "  CPU ms per target by thread (median): "
            + ", ".join(
                f"{k} {statistics.median(r.get(k, 0.0) for r in split) / args.targets * 1e3:.2f}"
                for k in names
                if statistics.median(r.get(k, 0.0) for r in split) > 0
            )
        )
        roles: dict[str, float] = {}
        for k in names:
            role = ROLES.get(k, "other")
            roles[role] = roles.get(role, 0.0) + statistics.median(r.get(k, 0.0) for r in split)
        summary = (
            f"SUMMARY {args.targets} targets, {args.interval:g}s interval: {over} of {len(fleet) - 1} full-fleet "
            f"cycles past the interval (median wall {wall:.1f}s, slowest {slowest:.1f}s), the first (cold: every "
            f"parser and series new) {fleet[0][4]:.1f}s; CPU {med / args.targets * 1e3:.2f} "
            "ms per target-cycle, by thread: "
            + ", ".join(f"{k} {v / args.targets * 1e3:.2f}" for k, v in roles.items() if v > 0)
            + f"; RSS after the retention {per_min:+.1f} MB per simulated minute; targets down after a cycle: "
            f"median {statistics.median(downs[1 : len(fleet)]):g}, most {max(downs[1 : len(fleet)])}"
        )
    for pid in child_pids:  # the daemon simulates in a child process: its memory is the pod's too
        print(f"simulation child {pid}: RSS {rss_mb(pid):.0f} MB (not in the curve above)")
    print(
        f"cycles longer than the interval: {over} of {len(fleet) - 1}; "
        f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
    )
    if full and not args.realtime:
        print(f"{summary}; load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    if after:
        # blocks: Python objects alive; RSS beyond them is memory the allocators keep (freed, not returned)
        print(
            f"after the reload to {args.reload_to}: RSS {fleet[-1][3]:.0f} -> {after[0][3]:.0f} -> "
            f"{after[-1][3]:.0f} MB, series {fleet[-1][5]} -> {after[-1][5]}, Python blocks {fleet[-1][6]} -> "
            f"{after[-1][6]}; full fleet peak {max(r[3] for r in fleet):.0f} MB; start {start_rss:.0f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
