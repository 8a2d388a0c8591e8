"""1,000 targets all at a limit on one core: how long a refresh of every prediction and headroom takes, and what it
does to the cycle.

usage: python benchmarks/bench_fleet_refresh.py [--targets 1000] [--interval 15] [--refresh 180] [--distinct 10]
           [--fill 75] [--threads] [--nice 19] [--quick] [--alone]

The process is pinned to one CPU. Every target replays a real vLLM 0.32 recording at a limit (compute_bound and
kv_bound in turn, looped with their counters running on so a pass is not an engine restart; each frame parsed once
and shared: this measures the what-if, not the scrape), with SLOs (ttft_p95 2 s, itl_p95 200 ms), through a Pipeline
with the daemon's advisor and headroom workers on their threads. Targets are offset by up to --distinct frames, so
their windows (and fingerprints) differ as replicas' would. Cycles run on the wall clock every --interval seconds:
first --fill seconds with the workers held (the cycle "without predictions"), then until every target at a limit has
had fresh effects and headroom, and one more refresh period (at most three periods). Simulations run where the
daemon runs them, in a child process pinned to the same core at nice --nice (19 as the daemon; 0 on a machine other
jobs keep busy, where a nice-19 child gets next to nothing; --threads: on the worker threads, for comparison).
A target is refreshed as the daemon means it: its headroom and, where its advice names a change, an effect simulated
after the workers were let go and less than the refresh period ago (a kept effect is one re-checked since; a shared
one a replica's). Prints the cycle's wall time and CPU without and with predictions, CPU per target-cycle, the
workers' counters (computed, shared, kept, dropped), the what-if queue's depth, how many targets at a limit show
something older than the period after the first refresh, and the verdict: the refresh's wall time against --refresh, and the CPU a period needs
on one core (its cycles plus the refresh's simulations). Load average beside it: the machine may be shared.
On a machine too busy for the refresh to finish, --alone measures two of the fleet's cycles and each recording's
refresh computed inline for one target (process CPU), and projects what a period needs of one core.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fleet_data import Template, recording_dir  # noqa: E402
from fleet_loop import Looped  # noqa: E402

from kvdoctor.diagnosis.target import TargetFacts  # noqa: E402
from kvdoctor.pipeline import Pipeline  # noqa: E402
from kvdoctor.rules.loader import default_rule_files, load_files  # noqa: E402
from kvdoctor.verdicts import LIMITS  # noqa: E402
from kvdoctor.whatif.advisor import Advisor  # noqa: E402
from kvdoctor.whatif.headroom import HeadroomWorker  # noqa: E402
from kvdoctor.whatif.jobs import MAX_QUEUE  # noqa: E402
from kvdoctor.whatif.offload import NICE_ENV, shared  # noqa: E402

AT_LIMIT = ("compute_bound", "kv_bound")
SLOS = {"ttft_p95": 2.0, "itl_p95": 0.2}  # the targets' SLOs, as the headroom worker is asked for them


def _cpu(path: str) -> float:
    try:
        with open(path, encoding="ascii") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def workers_cpu_s(names: tuple[str, ...]) -> float:
    """CPU seconds the named Python threads and the simulation child have used."""
    threads = [t.native_id for t in threading.enumerate() if t.name in names and t.native_id is not None]
    child = sum(_cpu(f"/proc/{pid}/stat") for pid in shared().pids())
    return sum(_cpu(f"/proc/self/task/{tid}/stat") for tid in threads) + child


def fresh(
    diagnoses: list, since: float, now: float, refresh_s: float
) -> tuple[set[str], set[str], int, int, float]:
    """Targets at a limit; those fresh as the product means it (headroom and, where the advice names a change, an
    effect simulated after `since` and less than refresh_s before `now`: a kept effect was simulated less than
    refresh_s ago and re-checked since, a shared one simulated that recently from a near window); how many targets'
    advice names a change and how many show such an effect; the oldest effect a target at a limit shows (s)."""
    floor = max(since, now - refresh_s)
    at_limit, refreshed, want, eff, oldest = set(), set(), 0, 0, 0.0
    for d in diagnoses:
        asks = any(a.change for a in d.advice)
        has = any(a.effect is not None and a.effect.t >= floor for a in d.advice)
        want, eff = want + asks, eff + has
        if str(getattr(d.verdict, "value", d.verdict)) in LIMITS:
            at_limit.add(d.target)
            ages = [now - a.effect.t for a in d.advice if a.effect is not None and a.effect.t >= since]
            oldest = max(oldest, *ages) if ages else oldest
        if float(d.evidence.get("slo_headroom_timestamp", 0.0) or 0.0) >= floor and (has or not asks):
            refreshed.add(d.target)
    return at_limit, refreshed, want, eff, oldest


def _stats(xs: list[float]) -> str:
    return f"p50 {statistics.median(xs):.2f} s, max {max(xs):.2f} s ({len(xs)} cycles)" if xs else "-"


def verdict(
    args: argparse.Namespace,
    rows: list[tuple[str, float, float, int, int]],
    span: tuple[float | None, float | None],
    w_cpu: float,
    counts: tuple[dict[str, int], dict[str, int]],
) -> None:
    """The done line's verdict: the refresh against its period, in wall time and in CPU of one core."""
    n, period = args.targets, args.refresh
    base = [r for r in rows[1:] if r[0] == "fill"]
    busy = [r for r in rows if r[0] == "busy"]
    after = [r for r in rows if r[0] != "fill"]
    cpu0, cpu1 = [r[2] for r in base], [r[2] for r in after]
    print(
        f"\ncycle wall, no predictions: {_stats([r[1] for r in base])}; with: {_stats([r[1] for r in after])}"
    )
    print(f"cycle thread CPU, no predictions: {_stats(cpu0)}; with: {_stats(cpu1)}")
    if cpu0 and cpu1:
        a, b = statistics.median(cpu0), statistics.median(cpu1)
        print(
            f"CPU per target-cycle (cycle thread): {1e3 * a / n:.2f} ms without predictions, {1e3 * b / n:.2f} ms "
            f"with ({b / a:.2f}x)"
        )
    late = sum(1 for r in after if r[1] > args.interval)
    print(f"cycles past the {args.interval:g} s interval with predictions: {late} of {len(after)}")
    asked, done = span
    adv, head = counts
    print(
        f"simulations for {n} targets: effects {adv['computed']} computed, {adv['shared']} shared; headroom "
        f"{head['computed']} computed, {head['shared']} shared; dropped {adv['dropped']} + {head['dropped']}"
    )
    cycles = period / args.interval
    cycle_cpu = statistics.median(cpu1) if cpu1 else 0.0
    runs = adv["computed"] + head["computed"]
    if asked is None or done is None:
        print(
            f"VERDICT: a refresh of every target at a limit ({n} targets) does NOT fit its {period:g} s period on "
            f"one core: not done within 3 periods; the workers used {w_cpu:.0f} s of CPU for {runs} computations "
            f"({w_cpu / max(1, runs):.1f} s each) beside {cycles:.0f} cycles x {cycle_cpu:.2f} s a period"
        )
        return
    took = done - asked
    # on one core a period must hold its cycles and the refresh's simulations (the child's CPU included)
    need = cycles * cycle_cpu + w_cpu
    print(
        f"VERDICT: a refresh of every target at a limit ({n} targets) {'fits' if need <= period else 'does NOT fit'}"
        f" its {period:g} s period on one core: {w_cpu:.0f} s of simulations ({runs} computations) + "
        f"{cycles:.0f} cycles x {cycle_cpu:.2f} s = {need:.0f} s of CPU ({need / period:.0%} of the core); "
        f"wall: refreshed in {took:.0f} s, {len(busy)} cycles ran meanwhile (the wall time depends on what else "
        "runs on the core)"
    )


def alone(args: argparse.Namespace, pipeline: Pipeline, names: list[str], loops: list[Looped]) -> None:
    """The fleet's cycle CPU (two cycles), then one target of each recording refreshed inline after a full
    history: what a refresh of every distinct window (--distinct offsets of each) needs of one core a period."""
    cycle_cpu = 0.0
    for k in range(2):
        c0 = time.thread_time()
        for i, name in enumerate(names):
            pipeline.observe(name, 1e9 + 15 * k, loops[i % len(loops)].text(k))
        pipeline.evaluate(1e9 + 15 * k + 0.5)
        cycle_cpu = time.thread_time() - c0
    per_window = 0.0
    for r, loop in zip(AT_LIMIT, loops, strict=True):
        advisor = Advisor()  # sync: computed here, on this process' CPU clock
        one = Pipeline(load_files(default_rule_files()))
        one.add_target(names[0], TargetFacts(slo_ttft_p95_s=2.0, slo_itl_p95_s=0.2))
        one._parsers[names[0]] = loop
        for k in range(int(advisor.history_s / args.interval) + 2):
            t = 1e9 + k * args.interval
            one.observe(names[0], t - 0.5, loop.text(k))
            advisor.observe(names[0], t - 0.5, loop.parse(loop.text(k)).samples)
            cycle = one.evaluate(t)
        c0 = time.process_time()
        advisor.annotate(cycle.diagnoses, t)
        HeadroomWorker(advisor.snaps).annotate(cycle.diagnoses, t, {names[0]: (SLOS, None)})
        cpu = time.process_time() - c0
        per_window += cpu
        d = cycle.diagnoses[0]
        print(
            f"{r}: {d.verdict}; its refresh alone {cpu:.1f} s of CPU ({len(advisor._effects)} effects and a "
            f"headroom search: {d.evidence.get('slo_headroom_ttft_p95')}, {d.evidence.get('slo_headroom_itl_p95')})"
        )
    windows, cycles = args.distinct, args.refresh / args.interval
    need = windows * per_window + cycles * cycle_cpu
    print(
        f"VERDICT (projected from CPU measured alone): a refresh of every target at a limit ({args.targets} targets, "
        f"{windows * len(AT_LIMIT)} distinct windows) {'fits' if need <= args.refresh else 'does NOT fit'} its "
        f"{args.refresh:g} s period on one core: {windows} x {per_window:.1f} s of simulations + {cycles:.0f} cycles "
        f"x {cycle_cpu:.2f} s = {need:.0f} s of CPU ({need / args.refresh:.0%} of the core)"
    )


def main() -> int:
    """Run the fleet on one core and print the measurements."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--refresh", type=float, default=180.0, help="the workers' refresh period, s")
    ap.add_argument("--distinct", type=int, default=10, help="frame offsets among targets (distinct windows)")
    ap.add_argument("--fill", type=float, default=75.0, help="seconds of cycles before the workers may run")
    ap.add_argument("--quick", action="store_true", help="100 targets, a 5 s interval, 60 s refresh")
    ap.add_argument("--threads", action="store_true", help="simulate on the worker threads, not in the child")
    ap.add_argument(
        "--alone",
        action="store_true",
        help="no refresh on the wall clock: each recording's refresh computed inline (process CPU) and the CPU a "
        "period needs projected (for a machine too busy for the full run to finish)",
    )
    ap.add_argument(
        "--nice",
        type=int,
        default=19,
        help="the child's niceness (the daemon's 19; 0 where others load the machine)",
    )
    args = ap.parse_args()
    if args.quick:
        args.targets, args.interval, args.refresh, args.fill = 100, 5.0, 60.0, 40.0
    # at 19 the child gets next to nothing on a core other jobs keep busy: its CPU, not its pace, is then measured
    os.environ[NICE_ENV] = str(args.nice)
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})  # one core: the cycle and the workers compete for it as on a 1-CPU pod
    src = recording_dir()
    # each recording looped with its counters running on (a pass is not an engine restart), parsed once per frame
    loops = [Looped(Template(src / f"{r}.jsonl.gz", 1e9, args.interval, set()).texts) for r in AT_LIMIT]
    offload = None if args.threads else shared()  # as the daemon: a nice-19 child process, on the same core
    advisor = Advisor(background=True, refresh_s=args.refresh, offload=offload)
    headroom = HeadroomWorker(
        advisor.snaps, refresh_s=args.refresh, background=True, max_queue=MAX_QUEUE, offload=offload
    )
    pipeline = Pipeline(load_files(default_rule_files()), advisor=advisor, headroom=None)
    facts = TargetFacts(slo_ttft_p95_s=2.0, slo_itl_p95_s=0.2)
    names = [f"vllm-{i:04d}:8000" for i in range(args.targets)]
    for i, name in enumerate(names):
        pipeline.add_target(name, facts)
        # one parse per frame, shared: the scrape is not measured here
        pipeline._parsers[name] = loops[i % len(loops)]
    real_advisor = pipeline.advisor
    pipeline.advisor = None  # held: the fill phase's cycles are the cycle without predictions
    if args.alone:
        alone(args, pipeline, names, loops)
        return 0
    rows: list[tuple[str, float, float, int, int]] = []
    workers = ("kvdoctor-whatif", "kvdoctor-headroom")
    start = time.time()
    k = 0
    refreshed_at: float | None = None
    asked_at: float | None = None
    w_cpu0 = w_cpu = w_prev = 0.0
    done_targets: set[str] = set()
    depth, late_fresh, oldest_after = (
        0,
        0,
        0.0,
    )  # the what-if queue's deepest; after the refresh: stale targets, age
    print(
        f"{args.targets} targets at a limit, interval {args.interval:g}s, refresh {args.refresh:g}s, "
        f"{args.distinct} distinct offsets, pinned to CPU {cpu}, simulations "
        f"{'on the worker threads' if args.threads else f'in a child at nice {args.nice}'}"
    )
    while True:
        slot = start + k * args.interval
        time.sleep(max(0.0, slot - time.time()))  # a benchmark on the wall clock, as the daemon paces cycles
        t = time.time()
        phase = "fill" if t - start < args.fill else "whatif"
        if phase == "whatif" and asked_at is None:
            pipeline.advisor, pipeline.headroom = real_advisor, headroom
            asked_at, w_cpu0 = t, workers_cpu_s(workers)
        c0, w0 = time.thread_time(), time.monotonic()
        for i, name in enumerate(names):
            loop = loops[i % len(loops)]
            ts, text = t - 0.5 + (i % 97) / 200, loop.text(k + (i // len(loops)) % args.distinct)
            pipeline.observe(name, ts, text)
            if pipeline.advisor is None:  # held: its history fills, as the pipeline's observe would fill it
                real_advisor.observe(name, ts, loop.parse(text).samples)
        cycle = pipeline.evaluate(t)
        wall, cpu_s = time.monotonic() - w0, time.thread_time() - c0
        counts = (advisor.stats(), headroom.stats())
        now_cpu = workers_cpu_s(workers)
        spent, w_prev = now_cpu - w_prev, now_cpu
        at_limit, now_fresh, want, eff, oldest = fresh(cycle.diagnoses, asked_at or 1e18, t, args.refresh)
        done_targets |= now_fresh
        queued = counts[0]["queued"] + counts[1]["queued"]
        if asked_at is not None:
            depth = max(depth, counts[0]["queued"])
            if (
                refreshed_at is not None
            ):  # after the first refresh: what a target at a limit shows stays fresh
                late_fresh = max(late_fresh, len(at_limit - now_fresh))
                oldest_after = max(oldest_after, oldest)
        # the refresh is done when every target now at a limit has had fresh effects and headroom since asked
        complete = asked_at is not None and bool(at_limit) and at_limit <= done_targets
        busy = asked_at is not None and refreshed_at is None
        rows.append(
            (phase if phase == "fill" else ("busy" if busy else "idle"), wall, cpu_s, eff, len(now_fresh))
        )
        print(
            f"cycle {k:3d} {rows[-1][0]:5s} wall {wall:6.2f}s cpu {cpu_s:6.2f}s  at a limit {len(at_limit)}, "
            f"refreshed {len(at_limit & done_targets)}, stale now {len(at_limit - now_fresh)}; effects {eff}/{want}, "
            f"oldest {oldest:.0f} s; queued {queued}; workers {spent:5.1f} s CPU  whatif {counts[0]}  headroom "
            f"{counts[1]}",
            flush=True,
        )
        if refreshed_at is None and complete:
            refreshed_at = time.time()
            w_cpu = workers_cpu_s(workers) - w_cpu0
            print(f"refreshed: all {len(at_limit)} targets at a limit have fresh predictions and headroom")
        if refreshed_at is not None and t - refreshed_at >= args.refresh:
            break
        if asked_at is not None and t - asked_at > 3 * args.refresh:
            print("not every target refreshed within 3 refresh periods")
            w_cpu = workers_cpu_s(workers) - w_cpu0
            break
        k += 1
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    verdict(args, rows, (asked_at, refreshed_at), w_cpu, (advisor.stats(), headroom.stats()))
    print(
        f"what-if queue: deepest {depth} at a cycle's end (of {MAX_QUEUE}); after the refresh, targets at a limit "
        f"showing an effect or headroom older than the {args.refresh:g} s period: at most {late_fresh} in a cycle, "
        f"oldest effect shown {oldest_after:.0f} s"
    )
    print(f"load average {load} (the machine may be shared: wall times and the nice-19 child's pace with it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
