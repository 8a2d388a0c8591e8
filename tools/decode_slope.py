"""What a light window says about the cost per decoding request, against what the server showed at larger batches.

usage: python tools/decode_slope.py [--ramps RAMPS_JSON] [--plancheck PLANCHECK_JSON] [--budget TOKENS]

Per ramp of ramps.json and for plan's check (plancheck.json), from the light step's history alone (the recording up
to the light step's end, as `plan --window` reads it):
- the decoding batches the history shows, the structure prior's c_decode (mean ± sd) and the fitted one;
- the rows' relative noise two ways: the fit's own residual spread (what bayes.py uses), and the scatter between
  neighbouring rows about the same fit (a noise estimate the fit cannot absorb: a difference of neighbours). Rough:
  the rows come as history_rows gives them (an interval's ITL row, its step-period row, the next interval's, then
  the prefill-time rows), so a pair can be two readings of one interval (too small) or of two kinds (too large);
- what the recorded server showed: ITL p50 against running requests from the light step to every other step or run,
  as ms per extra running request (not corrected for the prefill share of a step, which grows with the load).
If the two noise estimates agree, the window's noise does not explain a fitted c_decode that extrapolates badly:
the local slope is read correctly, and the server's per-request cost bends with the batch beyond it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdoctor.whatif.bayes import nonneg_posterior, spread  # noqa: E402
from kvdoctor.whatif.prior import structural  # noqa: E402
from kvdoctor.whatif.sources import recording_snaps  # noqa: E402
from kvdoctor.whatif.stepfit import COEFFS, fit_rows, history_rows  # noqa: E402

FIXTURES = ROOT / "tests/fixtures/recordings"
RAMPS = FIXTURES / "vllm-0.32-cpu-ramps/ramps.json"
PLANCHECK = FIXTURES / "vllm-0.32-cpu-plancheck/plancheck.json"


def window_fit(recording: Path, end_s: float, budget: int) -> str:
    """The light history's batches, prior and fitted c_decode, and its two noise estimates, in one line."""
    snaps = recording_snaps(recording)
    history = [s for s in snaps if s.t - snaps[0].t <= end_s]
    rows = history_rows(history, budget)
    prior = structural(rows)
    model = fit_rows(rows)
    post, pinned = nonneg_posterior(rows, list(prior.mean), list(prior.sd), 1.0)
    resid = spread(post.mean, rows, len(COEFFS) - len(pinned))
    ratio = [math.log(y / sum(c * f for c, f in zip(post.mean, x, strict=True))) for x, y, _ in rows]
    diffs = [(a - b) ** 2 for a, b in itertools.pairwise(ratio)]
    neighbours = math.sqrt(sum(diffs) / len(diffs) / 2) if diffs else math.nan
    levels = sorted({round(x[1] * 2) / 2 for x, _, w in rows if w > 0})
    return (
        f"batches {levels[0]:g}-{levels[-1]:g} ({len(levels)} levels, {len(rows)} rows); c_decode prior "
        f"{prior.mean[1] * 1e3:.2f} ± {prior.sd[1] * 1e3:.2f} ms, fitted {model.c_decode * 1e3:.2f} ms "
        f"({model.provenance[1]}); noise: fit residual {resid:.3f}, neighbours {neighbours:.3f}"
    )


def slopes(light: tuple[float, float], others: list[tuple[str, float, float]]) -> str:
    """ITL p50 per extra running request from the light point to each other one."""
    run0, itl0 = light
    parts = [
        f"{name} {run:.1f} run {itl * 1e3:.1f} ms: {(itl - itl0) / (run - run0) * 1e3:.2f}"
        for name, run, itl in others
        if run - run0 > 1.0
    ]
    head = f"light {run0:.2f} running, ITL p50 {itl0 * 1e3:.1f} ms; ms per extra request to: "
    return head + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ramps", type=Path, default=RAMPS)
    ap.add_argument("--plancheck", type=Path, default=PLANCHECK)
    ap.add_argument("--budget", type=int, default=2048, help="max_num_batched_tokens of the recorded servers")
    args = ap.parse_args(argv)
    for ramp in json.loads(args.ramps.read_text())["ramps"]:
        steps = ramp["steps"]
        light = steps[0]
        fit = window_fit(args.ramps.parent / ramp["recording"], light["window"][1], args.budget)
        print(f"{ramp['name']}: {fit}")
        points = [(f"{s['rate']:g}/s", s["vllm"]["running"], s["vllm"]["itl_p50_s"]) for s in steps[1:]]
        print("  " + slopes((light["vllm"]["running"], light["vllm"]["itl_p50_s"]), points))
    if args.plancheck.exists():
        doc = json.loads(args.plancheck.read_text())
        light = next(r for r in doc["runs"] if r["role"] == "light")
        fit = window_fit(args.plancheck.parent / light["recording"], light["step"]["window"][1], args.budget)
        print(f"plancheck {light['name']}: {fit}")
        points = [
            (r["name"], r["step"]["vllm"]["running"], r["step"]["vllm"]["itl_p50_s"])
            for r in doc["runs"]
            if r["role"] != "light"
        ]
        print("  " + slopes((light["step"]["vllm"]["running"], light["step"]["vllm"]["itl_p50_s"]), points))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
