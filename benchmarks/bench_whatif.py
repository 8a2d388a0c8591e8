"""What-if: simulator speed, prediction accuracy and 80 % interval coverage over every recorded before/after pair.

usage: python benchmarks/bench_whatif.py [--pairs DIR …] [--seeds 3] [--long RECORDING]

Speed: 5 minutes of open-loop traffic at 50 req/s (prompt 100-300, output 64-256 tokens) through the V1 scheduler
simulation, with the step-time model fitted to the real batch_cap recording and a cache 10x the recorded one, so
the queue, chunked prefill and block allocation all work; target ≤ 2 s. Then one whole `whatif` prediction (learn
once, both sides, the interval's short simulations) on a 5-minute window of a real recording; target ≤ 2 s.

Accuracy, per pair of pairs.json (the same seeded load against a server before and after one flag change): the
prediction made from the before recording's heavy phase (history: the whole before recording) against what the
after recording measured in its heavy phase, and the unchanged prediction against the before heavy phase itself.
Reports the absolute relative error on TTFT p50, ITL p50, generation tokens/s, TTFT p95 and ITL p95, the median over
pairs (the bench's targets: ≤ 15 % unchanged, ≤ 25 % changed, ≤ 40 % for the p95s), and whether each change's
direction is right. The "done line" rows hold the medians after the change to issue #21's: ≤ 10 % on TTFT p50, ITL
p50 and tokens/s, ≤ 25 % on TTFT p95 and ITL p95, every direction right, set-aside within 1.5× of tuned.

A pair that turns on what its before side cannot measure (speculation's acceptance, the traffic's prefix hits) is
scored in reverse, "(reversed)": predicted from the after recording with it turned off, against the before one.

Bucket resolution: each latency quantile of the after side is read from vLLM's buckets; the true value can be anywhere
in its bucket, so half the bucket's width over its middle is an error no prediction can beat ("bucket ±").

Intervals: the share of measured values inside the predicted p10-p90 (goal 70-90 % after the change) and the
median relative width, over TTFT p50/p95, ITL p50/p95 and tokens/s.

Tuned and set-aside parts, a rule fixed before any interval was scored: in each pair folder, in name order, every
third pair (the 3rd, 6th, …) is set aside; errors and coverage are reported for each part separately.
Also the unchanged error on the labelled single recordings of ../shared/recordings/vllm-0.32-cpu.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import repeats  # noqa: E402
from whatif_table import header, pair_rows, pct  # noqa: E402

from kvdoctor.whatif.compare import COVERED, HEADLINE, errors, load_pairs, run_pair  # noqa: E402
from kvdoctor.whatif.members import MEMBERS  # noqa: E402
from kvdoctor.whatif.model import Engine, LengthDist, Workload  # noqa: E402
from kvdoctor.whatif.predict import predict  # noqa: E402
from kvdoctor.whatif.sim import Simulator  # noqa: E402
from kvdoctor.whatif.sources import recording_snaps  # noqa: E402
from kvdoctor.whatif.stepfit import fit_step_model  # noqa: E402
from kvdoctor.whatif.window import in_window  # noqa: E402

PAIRS = ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-whatif"
PAIRS2 = ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-whatif2"  # recorded in session 5, when present
PAIRS3 = ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-whatif3"  # session 10's load changes, all set aside
# session 11: plan's second check's runs, cap changes at one rate, Llama-shaped in bf16 on an Intel Xeon; set aside
PAIRS4 = ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-plancheck2"
# session 12: plan's third check's runs, the same model and CPU on another day; set aside
PAIRS5 = ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-plancheck3"
PAIRS6 = (
    ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-dp"
)  # session 15: uneven data-parallel shares, set aside
PAIRS7 = (
    ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-rising"
)  # session 16: open loops rising across the window, set aside
PAIRS8 = (
    ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-whatif4"
)  # session 21: fresh held-out pairs, Llama-shaped in bf16, set aside
COVERAGE_GOAL = (0.70, 0.90)
# recordings with 5 minutes of traffic for the whatif timing, the first present is used
LONG = (
    ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-margins/tiny_ramp_c32.jsonl.gz",
    ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-margins/tiny_ramp_c32.jsonl",
)
LONG_WINDOW_S = 300.0
SHARED = ROOT.parent / "shared/recordings/vllm-0.32-cpu"
TARGET = {"unchanged": 0.15, "changed": 0.25}
TARGET_TAIL = 0.40  # the p95s'
TAILS = ("ttft_p95_s", "itl_p95_s")
# issue #21's done line: median error after the change on all recorded pairs, and the set-aside part's against tuned
DONE_LINE = dict(
    zip(HEADLINE, (0.10, 0.10, 0.10, 0.25, 0.25), strict=True)
)  # TTFT/ITL p50, tok/s, TTFT/ITL p95
DONE_SET_ASIDE = 1.5
SPEED_TARGET_S = 2.0


def speed() -> float:
    """Seconds to simulate 5 minutes at 50 req/s."""
    rec = SHARED / "batch_cap.jsonl.gz"
    snaps = recording_snaps(rec if rec.exists() else ROOT / "kvdoctor/demo/batch_cap.jsonl.gz")
    step = fit_step_model(snaps, 2048)
    engine = Engine(max_num_seqs=256, max_num_batched_tokens=2048, num_gpu_blocks=40960, block_size=16)
    w = Workload(
        "open", 50.0, 0, 0.0, LengthDist(((100, 300, 1.0),), 200), LengthDist(((64, 256, 1.0),), 160)
    )
    t = time.process_time()  # CPU seconds: the machine the bench shares is often busy
    res = Simulator(engine, step).run_workload(w, 300.0, 0.0, seed=1)
    took = time.process_time() - t
    print(
        f"speed: 300 s at 50 req/s simulated in {took:.2f} s of CPU ({res.steps} steps, {res.finished} requests done, "
        f"{res.running_max} max running) — target ≤ {SPEED_TARGET_S:g} s: {'ok' if took <= SPEED_TARGET_S else 'MISSED'}"
    )
    return took


def whatif_speed(long: Path | None) -> float:
    """Seconds one `whatif` prediction takes (learn, the two sides, the interval members) on 5 minutes of traffic."""
    found = [p for p in ((long,) if long else LONG) if p.exists()]
    if not found:
        print("whatif: no recording of 5 minutes of traffic present; see the slowest pair below")
        return 0.0
    snaps = recording_snaps(found[0])
    busy = [s for s in snaps if s.get("vllm:num_requests_running", 0.0) > 0]
    hi = busy[-1].t
    window = [s for s in snaps if hi - LONG_WINDOW_S <= s.t <= hi]
    t = time.process_time()
    pred = predict([s for s in snaps if s.t <= hi], window, {"max_num_seqs": 64})
    took = time.process_time() - t
    span = window[-1].t - window[0].t
    print(
        f"whatif: {found[0].name}, a {span:.0f} s window ({pred.workload.kind} loop), max_num_seqs=64 predicted "
        f"with intervals in {took:.2f} s of CPU — target ≤ {SPEED_TARGET_S:g} s: {'ok' if took <= SPEED_TARGET_S else 'MISSED'}"
    )
    # what a user waits for: the command as a process, start-up and imports included, with the measured class's
    # replay of the recording
    argv = ["whatif", str(found[0]), "--window", f"{window[0].t - snaps[0].t:.1f}:{hi - snaps[0].t:.1f}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "kvdoctor", *argv, "--set", "max_num_seqs=64"],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    whole = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(
        f"  the whole command, a process of its own with its measured class replayed: {whole:.2f} s of CPU: "
        f"{'ok' if whole <= SPEED_TARGET_S else 'MISSED'}"
    )
    return max(took, whole)


def split(pairs: list[dict[str, object]]) -> list[tuple[str, dict[str, object]]]:
    """Each pair with its part: in name order, every third (the 3rd, 6th, …) is set aside, the rest tuned.

    The rule was fixed before any interval was scored, and the set-aside pairs' errors are not looked at while
    tuning (intervals.py's constants were tuned on the tuned part only)."""
    # a pair recorded after the rule was fixed says so (`set_aside`) and stays out of the count, so adding it does
    # not move an older pair from one part to the other
    ordered = sorted((p for p in pairs if not p.get("set_aside")), key=lambda p: str(p["name"]))
    later = [("set-aside", p) for p in pairs if p.get("set_aside")]
    return [("set-aside" if i % 3 == 2 else "tuned", p) for i, p in enumerate(ordered)] + later


def _median(values: list[float]) -> float:
    vs = [v for v in values if v == v]
    return statistics.median(vs) if vs else float("nan")


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else float("nan")


def accuracy(
    directories: list[Path], seeds: int, tuned_only: bool = False, show_set_aside: bool = False
) -> bool:
    """Per-pair errors, interval coverage and width, by part (tuned / set-aside); True when every target is met.

    A set-aside pair's own errors are not printed unless show_set_aside: only the parts' medians, so a session that
    tunes on the tuned part never sees which set-aside pair its change moved (issue #21's discipline)."""
    parts: list[tuple[str, Path, dict[str, object]]] = []
    for directory in directories:
        parts += [(part, directory, pair) for part, pair in split(load_pairs(directory))]
    if tuned_only:  # while tuning: the set-aside pairs are not even run
        parts = [p for p in parts if p[0] == "tuned"]
    if not parts:
        print(f"no pairs.json in {', '.join(map(str, directories))}")
        return False
    rows: dict[str, dict[str, dict[str, list[float]]]] = {
        p: {kind: {k: [] for k in HEADLINE} for kind in ("unchanged", "changed")}
        for p in ("tuned", "set-aside", "all")
    }
    inside: dict[str, dict[str, list[bool]]] = {p: {"unchanged": [], "changed": []} for p in rows}
    widths: dict[str, list[float]] = {p: [] for p in rows}
    resolution: dict[str, dict[str, list[float]]] = {p: {} for p in rows}
    all_right, slowest = True, (0.0, "")
    wrong = {"tuned": 0, "set-aside": 0}  # directions read wrong, by part
    print(header())
    for part, directory, pair in parts:
        for seed in range(seeds):
            t = time.perf_counter()
            r = run_pair(directory, pair, seed)
            slowest = max(slowest, (time.perf_counter() - t, r.name))
            for p in (part, "all"):
                for kind, errs in (("unchanged", r.unchanged_error), ("changed", r.changed_error)):
                    for k in HEADLINE:
                        rows[p][kind][k].append(errs[k])
                inside[p]["unchanged"] += r.inside_unchanged.values()
                inside[p]["changed"] += r.inside_changed.values()
                widths[p] += r.width_changed.values()
                for k, v in r.resolution_after.items():
                    resolution[p].setdefault(k, []).append(v)
            if seed == 0:
                if part == "tuned" or show_set_aside:
                    print("\n".join(pair_rows(r, part)))
                else:
                    print(f"{r.name:28s} {part:9s} (its errors are left out: --show-set-aside prints them)")
                all_right &= all(r.direction_right.values())
                wrong[part] += sum(not right for right in r.direction_right.values())
    ok = all_right
    n = {p: sum(1 for q, _, _ in parts if q == p) for p in ("tuned", "set-aside")}
    print(f"\nmedian over pairs × {seeds} seed(s) ({n['tuned']} tuned, {n['set-aside']} set aside):")
    meds: dict[str, dict[str, float]] = {}
    for p in ("all", "tuned", "set-aside"):
        for kind in ("unchanged", "changed"):
            meds[f"{p}/{kind}"] = {k: _median(rows[p][kind][k]) for k in HEADLINE}
            bounds = {k: TARGET_TAIL if k in TAILS else TARGET[kind] for k in HEADLINE}
            met = all(meds[f"{p}/{kind}"][k] <= bounds[k] for k in HEADLINE)
            if p == "all":
                ok &= met
            print(
                f"  {p:9s} {kind:10s}"
                + "".join(f"{k} {pct(meds[f'{p}/{kind}'][k])} (≤{bounds[k]:.0%})  " for k in HEADLINE)
                + ("ok" if met else "MISSED")
            )
    print(
        f"  directions (done line: every one right): {'all right' if all_right else 'some WRONG'} "
        f"({wrong['tuned']} wrong on the tuned part, {wrong['set-aside']} on the set-aside part)"
    )
    for p in ("all", "tuned", "set-aside"):
        med = meds[f"{p}/changed"]
        met = all(med[k] <= DONE_LINE[k] for k in HEADLINE)
        print(
            f"  {p:9s} {'done line':10s}"
            + "".join(f"{k} {pct(med[k])} (≤{DONE_LINE[k]:.0%})  " for k in HEADLINE)
            + ("ok" if met else "MISSED")
        )
    # what no prediction can beat: half the bucket the measured value is in
    for p in ("all", "tuned", "set-aside"):
        print(
            f"  {p:9s} bucket ±  "
            + "".join(f"{k} {pct(_median(v))}  " for k, v in resolution[p].items())
            + "(median after the change; an error below it is as close as vLLM's buckets can tell)"
        )
    repeats.report(HEADLINE)  # … and as close as this machine repeats itself
    lo, hi = COVERAGE_GOAL
    print(
        f"\n80 % intervals (p10-p90) on {', '.join(COVERED)}: share of measured values inside, goal "
        f"{lo:.0%}-{hi:.0%} after the change; median width (p90 - p10) / predicted"
    )
    for p in ("all", "tuned", "set-aside"):
        cov_u, cov_c = _share(inside[p]["unchanged"]), _share(inside[p]["changed"])
        met = lo <= cov_c <= hi
        if p == "all":
            ok &= met
        print(
            f"  {p:9s} unchanged {pct(cov_u)} of {len(inside[p]['unchanged'])}   changed {pct(cov_c)} of "
            f"{len(inside[p]['changed'])}   width {pct(_median(widths[p]))}   " + ("ok" if met else "MISSED")
        )
    for kind in ("unchanged", "changed"):
        ratio: dict[str, float] = {
            k: meds[f"set-aside/{kind}"][k] / meds[f"tuned/{kind}"][k]
            if meds[f"tuned/{kind}"][k]
            else float("nan")
            for k in HEADLINE
        }
        within = "ok" if all(v <= DONE_SET_ASIDE for v in ratio.values() if v == v) else "MISSED"
        done = f"   done line (≤{DONE_SET_ASIDE:g}×): {within}" if kind == "changed" else ""
        print(
            f"  set-aside / tuned median error, {kind:9s}: "
            + "  ".join(f"{k} {v:.2g}×" for k, v in ratio.items())
            + done
        )
    print(
        f"  slowest pair (reading both recordings, learn, 2 simulations, {2 * MEMBERS} interval members): "
        f"{slowest[0]:.2f} s ({slowest[1]})"
    )
    return ok


def singles() -> None:
    """Unchanged-prediction error on the labelled single recordings."""
    labels = SHARED / "labels.json"
    if not labels.exists():
        return
    print("\nunchanged prediction on single recordings (labelled window):")
    for entry in json.loads(labels.read_text()):
        if entry["expected"] == "idle":
            continue
        snaps = recording_snaps(SHARED / entry["file"])
        window = in_window(snaps, entry["steady_from"], entry["steady_to"])
        pred = predict([s for s in snaps if s.t <= entry["steady_to"]], window, {})
        errs = errors(pred.unchanged, pred.measured, HEADLINE)
        print(
            f"  {entry['file']:30s}"
            + "".join(f"{k} {pct(errs[k])}  " for k in HEADLINE)
            + f"class {pred.measured.bottleneck}/{pred.unchanged.bottleneck}"
        )


def main() -> int:
    """Run everything; exit 1 when a target is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--pairs",
        type=Path,
        action="append",
        help=f"pair folder(s) (default {PAIRS.name}, and {PAIRS2.name} … {PAIRS7.name} when present)",
    )
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tuned-only", action="store_true", help="run the tuned part only (while tuning)")
    ap.add_argument("--long", type=Path, help="a recording with 5 minutes of traffic for the whatif timing")
    ap.add_argument(
        "--show-set-aside",
        action="store_true",
        help="print each set-aside pair's errors too (for the closing note)",
    )
    args = ap.parse_args()
    took = max(speed(), whatif_speed(args.long))
    ok = accuracy(
        args.pairs
        or [d for d in (PAIRS, PAIRS2, PAIRS3, PAIRS4, PAIRS5, PAIRS6, PAIRS7, PAIRS8) if d.is_dir()],
        args.seeds,
        args.tuned_only,
        args.show_set_aside,
    )
    singles()
    return 0 if ok and took <= SPEED_TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
