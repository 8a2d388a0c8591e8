"""Each recorded ramp step, measured and simulated from one step model (issue 24: where the simulator departs).

usage: python tools/ramp_sim.py [--ramps RAMPS_JSON] [--only NAME] [--seed N] [--step light|whole]

Per ramp of ramps.json: learn the light step as `plan` does (workload, engine, step model from the history up to
it), then simulate the window's traffic scaled to each step's arrivals (the client's started requests/s) and print,
per step, running, waiting, tokens/s, ITL p50, TTFT p95 and queue time p95, measured (vLLM's metrics over the step's
steady part, ramps.json) over simulated, and the simulation's TTFT, queue and ITL means.

--step whole swaps in the step model fitted to the whole ramp (every batch the server went through): what the
simulator does with a step cost that is right at every batch, against what it does with the light step's.
Then, per batch bin of the whole ramp's intervals, the decode part of the mean ITL (the mean ITL less the light
model's prefill share) against the light model's c0 + c_decode × batch: where the light step's per-decoder cost
departs from the server's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdoctor.whatif import knobs  # noqa: E402
from kvdoctor.whatif.model import StepModel  # noqa: E402
from kvdoctor.whatif.predict import learn  # noqa: E402
from kvdoctor.whatif.readout import quantities, simulate  # noqa: E402
from kvdoctor.whatif.saturation import detect  # noqa: E402
from kvdoctor.whatif.sources import history_before, recording_snaps  # noqa: E402
from kvdoctor.whatif.stepfit import Row, fit_step_model, history_rows  # noqa: E402

RAMPS = ROOT / "tests/fixtures/recordings/vllm-0.32-cpu-ramps/ramps.json"
SHOWN = (
    ("running", "running", 1.0, "{:5.1f}"),
    ("waiting", "waiting", 1.0, "{:5.1f}"),
    ("tok/s", "generation_tokens_per_s", 1.0, "{:5.0f}"),
    ("ITL50 ms", "itl_p50_s", 1e3, "{:5.0f}"),
    ("TTFT95 s", "ttft_p95_s", 1.0, "{:5.2f}"),
    ("queue95 s", "queue_time_p95_s", 1.0, "{:5.2f}"),
)
BATCH_BINS = (1.5, 3.0, 6.0, 12.0, 24.0)  # upper edges of the decoding-batch bins; the last bin is open


def _said(s: StepModel) -> str:
    return (
        f"c0 {s.c0 * 1e3:.3g} ms + {s.c_decode * 1e3:.3g} ms/decoder + {s.c_prefill * 1e6:.3g} µs/prefill token + "
        f"{s.c_kv * 1e9:.3g} ns/context token + {s.c_attn * 1e9:.3g} ns/pair"
    )


def ramp(directory: Path, r: dict, seed: int, whole: bool) -> None:
    """One ramp's steps, measured / simulated."""
    snaps = recording_snaps(directory / r["recording"])
    light = r["steps"][r["light_step"]]
    history, window = history_before(snaps, *light["window_unix"])
    basis = learn(history, window, max_num_seqs=r["max_num_seqs"], seed=seed)
    w, light_step = basis.workload, basis.step
    step = fit_step_model(snaps, basis.engine.max_num_batched_tokens) if whole else light_step
    print(
        f"\n{r['name']}: light step {light['rate']} req/s; learned {w.kind} {w.rate_per_s:.3g} req/s, prompt "
        f"{w.prompt.mean:.0f}, output {w.output.mean:.0f} tokens; engine {basis.engine.max_num_batched_tokens} "
        f"tokens/step, {basis.engine.num_gpu_blocks} blocks\n  {'whole ramp' if whole else 'light step'}'s step: "
        f"{_said(step)}"
    )
    heads = " ".join(f"{h:>13s}" for h, *_ in SHOWN)
    print(f"  {'arrivals':>8s} {heads}  {'sim TTFT/queue/ITL mean':>23s}  (measured / simulated)")
    for ramp_step in r["steps"]:
        rate = ramp_step["client"]["arrivals_per_s"]
        engine, wl, n, _ = knobs.apply(
            basis.engine, w, basis.replicas, {"load": rate / w.rate_per_s}, basis.info
        )
        res = simulate(engine, step, wl, n, basis.duration_s, seed)
        q = quantities(res, n, basis.buckets, basis.sigma)
        cells = [
            f"{fmt.format(ramp_step['vllm'][key] * scale)}/{fmt.format(getattr(q, key) * scale)}"
            for _, key, scale, fmt in SHOWN
        ]
        ttft = sum(res.ttft) / max(1, len(res.ttft))
        queue = sum(res.queue) / max(1, len(res.queue))
        itl = sum(d * k for d, k in res.itl) / max(1, sum(k for _, k in res.itl))
        over = detect(res, wl, n)
        tail = (
            f"  overloaded: capacity {over.capacity_requests_per_s:.3g} req/s, "
            f"{over.capacity_generation_tokens_per_s:.3g} tok/s"
            if over
            else ""
        )
        means = f"{ttft:5.2f}/{queue:5.2f}/{itl * 1e3:4.0f}ms"
        print(f"  {rate:8.3g} " + " ".join(f"{c:>13s}" for c in cells) + f"  {means:>23s}" + tail)
    by_batch(history_rows(snaps, basis.engine.max_num_batched_tokens), light_step)


def by_batch(rows: list[Row], light: StepModel) -> None:
    """Per batch bin of the whole ramp's ITL rows: the decode part of the mean ITL against the light model's."""
    bins: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    for x, y, w in rows:
        if x[2] > 50 or x[1] < 0.5:
            continue  # a prefill-time row, or an interval with hardly any decoding
        decode_part = y - light.c_prefill * x[2] - light.c_attn * x[4]
        bins[sum(x[1] >= edge for edge in BATCH_BINS)].append((x[1], decode_part, w))
    print("  the whole ramp's mean ITL less the light model's prefill share, by decoding batch:")
    prev = None
    for b in sorted(bins):
        v = bins[b]
        total = sum(w for *_, w in v)
        batch = sum(x * w for x, _, w in v) / total
        part = sum(y * w for _, y, w in v) / total
        marginal = f"{(part - prev[1]) / (batch - prev[0]) * 1e3:5.2f}" if prev else "    —"
        model = light.c0 + light.c_decode * batch
        print(
            f"    batch {batch:5.1f}: {part * 1e3:6.1f} ms ({len(v):2d} intervals), {marginal} ms a decoder "
            f"more than the bin before; light model {model * 1e3:6.1f} ms ({model / part - 1:+4.0%})"
        )
        prev = (batch, part)


def main() -> None:
    """Every ramp (or --only one)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ramps", type=Path, default=RAMPS)
    ap.add_argument("--only", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step", choices=("light", "whole"), default="light")
    args = ap.parse_args()
    doc = json.loads(args.ramps.read_text())
    for r in doc["ramps"]:
        if not args.only or r["name"] == args.only:
            ramp(args.ramps.parent, r, args.seed, args.step == "whole")


if __name__ == "__main__":
    main()
