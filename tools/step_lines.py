"""How a recorded server's step grows with the batch, and how the what-if's step model prices it (issue 21 item 1).

usage: python tools/step_lines.py [--ramps RAMPS_JSON] [--pair PAIRS_JSON NAME] [--busy] [RECORDING …]

- Per ramp of ramps.json: the least-squares line of ITL p50 through the steps' running requests, and each step's
  distance from it, with what each step served against its arrivals: only a step behind its arrivals (a queue, or
  its batch still filling) can show the server's capacity at that batch; the others' tokens/s are the load offered.
- Per RECORDING: the step model fitted to the whole recording (`stepfit.fit_rows`) and its relative error on the fit's
  own rows by batch (ITL means and prefill times mixed, as the fit sees them).
- --pair: the step model fitted to a pair's before side, priced on the after side's rows by batch: how it
  extrapolates to the batches the change brought.
- --busy: the share of each second a step model accounts for (steps × c0 + decode tokens × a decoder's cost +
  prefill tokens × a prefill token's, from the window's counters), per ramp step under the ramp's light fit and,
  with --pair, for both heavy windows under the before fit, the after fit and every same-model ramp's light fit.
  A server behind its arrivals was busy the whole second (1.0); a fit that reads above 1 there says it could not
  have served that load (the capacity it simulates is short), below 1 that it could have served more.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdoctor.whatif.model import StepModel  # noqa: E402
from kvdoctor.whatif.sources import history_before, recording_snaps  # noqa: E402
from kvdoctor.whatif.stepfit import Row, fit_rows, history_rows  # noqa: E402
from kvdoctor.whatif.window import Snap, delta, mean_of  # noqa: E402

RAMPS = ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-ramps/ramps.json"
BUDGET = 2048  # max_num_batched_tokens the rows assume for a prefill (vLLM's default on these servers)
BIN = 5  # requests per batch bin


def ramp_lines(path: Path) -> None:
    """ITL p50 against running per ramp step, with the least-squares line through them."""
    for ramp in json.loads(path.read_text())["ramps"]:
        steps = [s for s in ramp["steps"] if s["vllm"]["running"] > 1]
        xs = [s["vllm"]["running"] for s in steps]
        ys = [s["vllm"]["itl_p50_s"] * 1e3 for s in steps]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
        base = my - slope * mx
        print(f"{ramp['name']}: ITL p50 ≈ {base:.1f} ms + {slope:.2f} ms per running request")
        for s, x, y in zip(steps, xs, ys, strict=True):
            v, c = s["vllm"], s["client"]
            # a queue, or a fifth of the arrivals not served: the batch was filling or the server at capacity
            behind = v["waiting"] >= 1 or v["requests_per_s"] < 0.8 * c["arrivals_per_s"]
            print(
                f"  running {x:5.1f}  ITL p50 {y:6.1f} ms (line {(base + slope * x) / y - 1:+4.0%})  "
                f"{v['generation_tokens_per_s']:6.1f} tok/s  served {v['requests_per_s']:.2f} of "
                f"{c['arrivals_per_s']:.2f} req/s{'  behind its arrivals' if behind else ''}"
            )


def by_batch(model: StepModel, rows: list[Row]) -> None:
    """The model's relative error on rows, by decoding batch."""
    bins: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for x, y, w in rows:
        if y > 0 and w > 0:
            bins[round(x[1] / BIN) * BIN].append((w, model.duration(*x[1:]) / y - 1))
    for b in sorted(bins):
        total = sum(w for w, _ in bins[b])
        err = sum(w * e for w, e in bins[b]) / total
        print(f"  batch ~{b:3d}: {len(bins[b]):4d} rows, model {err:+5.0%}")


def fitted(snaps: list[Snap]) -> StepModel:
    """The step model of a history, printed with each coefficient's origin."""
    m = fit_rows(history_rows(snaps, BUDGET))
    print(f"  {m.notes[-1] if m.notes else ''}")
    return m


def busy(model: StepModel, window: list[Snap]) -> str:
    """The share of the window's seconds the model's steps fill, with the load it is priced on, in one line."""
    a, b = window[0], window[-1]
    span = b.t - a.t
    steps = delta(a, b, "vllm:iteration_tokens_total_count")
    decode = delta(a, b, "vllm:generation_tokens_total")
    prefill = max(0.0, delta(a, b, "vllm:iteration_tokens_total_sum") - decode)
    prompt = mean_of(a, b, "vllm:request_prompt_tokens")
    out = mean_of(a, b, "vllm:request_generation_tokens")
    context = prompt + out / 2 if math.isfinite(prompt) and math.isfinite(out) else 0.0
    # a prompt of P tokens makes P/2 pairs a token (the spread of the lengths aside: a lower bound)
    pairs = prompt / 2 if math.isfinite(prompt) else 0.0
    seconds = (
        steps * model.c0
        + decode * (model.c_decode + model.c_kv * context)
        + prefill * (model.c_prefill + model.c_attn * pairs)
    )
    running = [s.get("vllm:num_requests_running", 0.0) for s in window]
    return (
        f"running {sum(running) / len(running):5.1f}, {steps / span:5.2f} steps/s, {decode / span:5.1f} decode and "
        f"{prefill / span:5.1f} prefill tokens/s: busy {seconds / span:4.2f}"
    )


def light_fits(path: Path) -> dict[str, tuple[str, StepModel]]:
    """Each ramp's step model from its light step's history (what plan learns), with the ramp's model in a word."""
    fits = {}
    for r in json.loads(path.read_text())["ramps"]:
        light = r["steps"][r["light_step"]]
        history, _ = history_before(recording_snaps(path.parent / r["recording"]), *light["window_unix"])
        fits[r["name"]] = (r["model"].split(":")[0], fit_rows(history_rows(history, BUDGET)))
    return fits


def ramp_busy(path: Path, fits: dict[str, tuple[str, StepModel]]) -> None:
    """Per ramp step, the share of its seconds the light step's fit accounts for."""
    for r in json.loads(path.read_text())["ramps"]:
        print(f"{r['name']}: each step under the light step's fit")
        snaps = recording_snaps(path.parent / r["recording"])
        for step in r["steps"]:
            lo, hi = step["window_unix"]
            window = [s for s in snaps if lo <= s.t <= hi]
            print(f"  {step['rate']:5g} req/s  {busy(fits[r['name']][1], window)}")


def pair_busy(pairs: Path, name: str, fits: dict[str, tuple[str, StepModel]]) -> None:
    """A pair's heavy windows under its before fit, its after fit and the same model's ramps' light fits."""
    pair = next(p for p in json.loads(pairs.read_text()) if p["name"] == name)
    model = pair["load"].split()[0]
    snaps = {side: recording_snaps(pairs.parent / pair[side]) for side in ("before", "after")}
    heavy = {side: pair[f"heavy_{side}"] for side in snaps}
    # the fits as --pair reads them: the before side's whole history, the after side's heavy window
    before = [s for s in snaps["before"] if s.t <= heavy["before"][1]]
    after = [s for s in snaps["after"] if heavy["after"][0] - 30 <= s.t <= heavy["after"][1]]
    models = {
        "before fit": fit_rows(history_rows(before, BUDGET)),
        "after fit": fit_rows(history_rows(after, BUDGET)),
    }
    models |= {f"{n}'s light fit": m for n, (kind, m) in fits.items() if kind == model}
    for side, (lo, hi) in heavy.items():
        window = [s for s in snaps[side] if lo <= s.t <= hi]
        print(f"{name} heavy {side}:")
        for label, m in models.items():
            print(f"  under the {label:30s} {busy(m, window)}")


def main() -> int:
    """Print what was asked."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recordings", nargs="*", type=Path)
    ap.add_argument("--ramps", type=Path, default=RAMPS)
    ap.add_argument("--pair", nargs=2, metavar=("PAIRS_JSON", "NAME"))
    ap.add_argument("--busy", action="store_true", help="the share of each second a step model accounts for")
    args = ap.parse_args()
    if args.busy:
        fits = light_fits(args.ramps)
        ramp_busy(args.ramps, fits)
        if args.pair:
            pair_busy(Path(args.pair[0]), args.pair[1], fits)
        return 0
    if args.ramps.exists():
        ramp_lines(args.ramps)
    for path in args.recordings:
        print(f"{path.name}:")
        snaps = recording_snaps(path)
        by_batch(fitted(snaps), history_rows(snaps, BUDGET))
    if args.pair:
        pairs = Path(args.pair[0])
        pair = next(p for p in json.loads(pairs.read_text()) if p["name"] == args.pair[1])
        before = [s for s in recording_snaps(pairs.parent / pair["before"]) if s.t <= pair["heavy_before"][1]]
        lo, hi = pair["heavy_after"]
        after = [s for s in recording_snaps(pairs.parent / pair["after"]) if lo - 30 <= s.t <= hi]
        print(f"{pair['name']}: the before side's step model on the after side's rows")
        by_batch(fitted(before), history_rows(after, BUDGET))
    return 0


if __name__ == "__main__":
    sys.exit(main())
