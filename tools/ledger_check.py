"""What a step ledger from another run of the same engine buys a light window's predictions of a ramp (out of sample).

usage: python tools/ledger_check.py [--ramps RAMPS_DIR]

For each (target, source) pair of ramps that share an engine (cache_config_info, so one step ledger): the source
recording, every scrape of it, is fed to a ledger as if it had run 6 h before the target's light step; then each
step of the target's ramp above the light one is predicted from the light step alone (`predict` with the load
multiple, the ramp's --max-num-seqs, no intervals), bare and with the ledger, against what vLLM measured on that
step (ramps.json). Prints each step's errors and the medians of |error|. TTFT p95 past saturation depends on the
simulated length (an open loop's queue grows), so read its medians on the steps that held.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdoctor.whatif.ledger import Ledgers  # noqa: E402
from kvdoctor.whatif.predict import predict  # noqa: E402
from kvdoctor.whatif.sources import recording_snaps  # noqa: E402

RAMPS = ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-ramps"
PAIRS = [
    ("tiny_ramp_c32_fine", "tiny_ramp_c32"),
    ("tiny_ramp_c8", "tiny_ramp_c32"),
    ("tiny_ramp_c32", "tiny_ramp_c32_fine"),
]
QUANTITIES = ("itl_p50_s", "generation_tokens_per_s", "ttft_p95_s")


def check(ramps: dict[str, dict], root: Path, target: str, source: str) -> None:
    """Print one pair's per-step errors, bare and with the ledger, and their medians."""
    ramp = ramps[target]
    snaps = recording_snaps(root / ramp["recording"])
    lo, hi = ramp["steps"][ramp["light_step"]]["window_unix"]
    light = [s for s in snaps if s.t <= hi]
    window = [s for s in light if s.t >= lo]
    ledger = Ledgers()
    src = recording_snaps(root / ramps[source]["recording"])
    shift = light[0].t - 6 * 3600 - src[0].t
    for s in src:
        ledger.add(target, replace(s, t=s.t + shift))
    recall = ledger.recall(target)
    base = ramp["steps"][ramp["light_step"]]["rate"]
    errors: dict[bool, list[list[float]]] = {False: [], True: []}
    for step in ramp["steps"]:
        k = step["rate"] / base
        if k <= 1.01:
            continue
        line = [f"{target} ×{k:.3g}"]
        for use in (False, True):
            p = predict(
                light,
                window,
                {"load": k},
                max_num_seqs=ramp["max_num_seqs"],
                recall=recall if use else None,
                with_intervals=False,
            )
            e = [getattr(p.predicted, q) / step["vllm"][q] - 1 for q in QUANTITIES]
            errors[use].append([abs(x) for x in e])
            line.append(
                f"{'ledger' if use else 'bare'}: "
                + " ".join(f"{q} {x:+.0%}" for q, x in zip(QUANTITIES, e, strict=True))
            )
        print(" | ".join(line))
    for use in (False, True):
        med = [statistics.median(e[i] for e in errors[use]) for i in range(len(QUANTITIES))]
        said = " ".join(f"{q} {m:.0%}" for q, m in zip(QUANTITIES, med, strict=True))
        print(f"  median |error| from {source}'s ledger: {'ledger' if use else 'bare  '} {said}")


def main() -> None:
    """Run every pair."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ramps", type=Path, default=RAMPS)
    args = ap.parse_args()
    ramps = {r["name"]: r for r in json.loads((args.ramps / "ramps.json").read_text())["ramps"]}
    for target, source in PAIRS:
        check(ramps, args.ramps, target, source)


if __name__ == "__main__":
    main()
