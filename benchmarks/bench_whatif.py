"""What-if: simulator speed, and prediction accuracy over every recorded before/after pair.

usage: python benchmarks/bench_whatif.py [--pairs DIR] [--seeds 3]

Speed: 5 minutes of open-loop traffic at 50 req/s (prompt 100-300, output 64-256 tokens) through the V1 scheduler
simulation, with the step-time model fitted to the real batch_cap recording and a cache 10x the recorded one, so
the queue, chunked prefill and block allocation all work; target ≤ 2 s.

Accuracy, per pair of pairs.json (the same seeded load against a server before and after one flag change): the
prediction made from the before recording's heavy phase (history: the whole before recording) against what the
after recording measured in its heavy phase, and the unchanged prediction against the before heavy phase itself.
Reports the absolute relative error on TTFT p50, ITL p50, generation tokens/s and TTFT p95, the median over pairs
(targets: ≤ 15 % unchanged, ≤ 25 % changed, ≤ 40 % for TTFT p95), and whether each change's direction is right.
Also the unchanged error on the labelled single recordings of ../shared/recordings/vllm-0.32-cpu.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdoctor.whatif.compare import HEADLINE, errors, load_pairs, run_pair  # noqa: E402
from kvdoctor.whatif.model import Engine, LengthDist, Workload  # noqa: E402
from kvdoctor.whatif.predict import predict  # noqa: E402
from kvdoctor.whatif.sim import Simulator  # noqa: E402
from kvdoctor.whatif.sources import recording_snaps  # noqa: E402
from kvdoctor.whatif.stepfit import fit_step_model  # noqa: E402
from kvdoctor.whatif.window import in_window  # noqa: E402

PAIRS = ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-whatif"
SHARED = ROOT.parent / "shared/recordings/vllm-0.32-cpu"
TARGET = {"unchanged": 0.15, "changed": 0.25}
TARGET_TTFT_P95 = 0.40
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
    t = time.perf_counter()
    res = Simulator(engine, step).run_workload(w, 300.0, 0.0, seed=1)
    took = time.perf_counter() - t
    print(f"speed: 300 s at 50 req/s simulated in {took:.2f} s ({res.steps} steps, {res.finished} requests done, "
          f"{res.running_max} max running) — target ≤ {SPEED_TARGET_S:g} s: {'ok' if took <= SPEED_TARGET_S else 'MISSED'}")  # fmt: skip
    return took


def _pct(v: float) -> str:
    return "  n/a" if v != v else f"{v:5.0%}"


def accuracy(directory: Path, seeds: int) -> bool:
    """Per-pair errors and the medians; True when every target is met."""
    pairs = load_pairs(directory)
    if not pairs:
        print(f"no pairs.json in {directory}")
        return False
    rows: dict[str, dict[str, list[float]]] = {"unchanged": {k: [] for k in HEADLINE},
                                               "changed": {k: [] for k in HEADLINE}}  # fmt: skip
    all_right = True
    print(f"\n{'pair':28s} {'':10s}" + "".join(f"{k:>24s}" for k in HEADLINE))
    for pair in pairs:
        for seed in range(seeds):
            r = run_pair(directory, pair, seed)
            for kind, errs in (("unchanged", r.unchanged_error), ("changed", r.changed_error)):
                for k in HEADLINE:
                    rows[kind][k].append(errs[k])
            if seed == 0:
                for kind, errs in (("unchanged", r.unchanged_error), ("changed", r.changed_error)):
                    print(f"{r.name:28s} {kind:10s}" + "".join(f"{_pct(errs[k]):>24s}" for k in HEADLINE))
                m, u, p, a = r.prediction.measured, r.prediction.unchanged, r.prediction.predicted, r.after
                print(f"{'':28s} {'direction':10s}" + "".join(
                    f"{'right' if r.direction_right[k] else 'WRONG':>9s} {getattr(m, k):.3g}→{getattr(a, k):.3g}"
                    f" ({getattr(u, k):.3g}→{getattr(p, k):.3g})".rjust(24) for k in HEADLINE))  # fmt: skip
                all_right &= all(r.direction_right.values())
    ok = all_right
    print(f"\nmedian over {len(pairs)} pair(s) × {seeds} seed(s):")
    for kind in ("unchanged", "changed"):
        meds = {
            k: statistics.median([e for e in rows[kind][k] if e == e] or [float("nan")]) for k in HEADLINE
        }
        bounds = {k: TARGET_TTFT_P95 if k == "ttft_p95_s" else TARGET[kind] for k in HEADLINE}
        met = all(meds[k] <= bounds[k] for k in HEADLINE)
        ok &= met
        print(f"  {kind:10s}" + "".join(f"{k} {_pct(meds[k])} (≤{bounds[k]:.0%})  " for k in HEADLINE)
              + ("ok" if met else "MISSED"))  # fmt: skip
    print(f"  directions: {'all right' if all_right else 'some WRONG'}")
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
        print(f"  {entry['file']:30s}" + "".join(f"{k} {_pct(errs[k])}  " for k in HEADLINE)
              + f"class {pred.measured.bottleneck}/{pred.unchanged.bottleneck}")  # fmt: skip


def main() -> int:
    """Run everything; exit 1 when a target is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=Path, default=PAIRS)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    took = speed()
    ok = accuracy(args.pairs, args.seeds)
    singles()
    return 0 if ok and took <= SPEED_TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
