"""A decode step's duration against its batch, read from a recording of closed loops (tools/record/record_step_curve.sh).

usage: python tools/step_curve.py RECORDING.jsonl[.gz] CLIENT.json [--budget TOKENS]

Per phase (its steady part: from 1/3 of the way in to its end), from vLLM's own counters: decoding requests per step
(ITL observations / steps), prefill tokens per step, the mean ITL (a step's duration, once per decoding request) and
the step period (elapsed / steps). Then the step model fitted to the lightest phases' rows (`stepfit.fit_rows`, what a
light window teaches the what-if) and what it prices every phase at: how a line through small batches extrapolates on
this machine. Beside it, the marginal cost per extra decoder between neighbouring phases.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdoctor.whatif.sources import recording_snaps  # noqa: E402
from kvdoctor.whatif.stepfit import fit_rows, history_rows  # noqa: E402
from kvdoctor.whatif.window import delta, hist_name, in_window  # noqa: E402

LIGHT = 3  # phases the light fit learns from


def main() -> int:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recording", type=Path)
    ap.add_argument("client", type=Path)
    ap.add_argument("--budget", type=int, default=2048)
    args = ap.parse_args()
    snaps = recording_snaps(args.recording)
    phases = json.loads(args.client.read_text())["phases"]
    itl = hist_name(snaps[-1], "itl")
    light_rows = []
    table = []
    for i, p in enumerate(phases):
        lo, hi = p["load_start"], p["load_end"]
        w = in_window(snaps, lo + (hi - lo) / 3, hi)
        if len(w) < 3:
            continue
        a, b = w[0], w[-1]
        steps = delta(a, b, "vllm:iteration_tokens_total_count")
        n = delta(a, b, f"{itl}_count")
        tokens = delta(a, b, "vllm:iteration_tokens_total_sum")
        itl_mean = delta(a, b, f"{itl}_sum") / n
        st = p["settings"]
        label = (
            f"{st['rate']:g}/s" if st["rate"] else f"{st['concurrency']} cl"
        ) + f" p{st['prompt_min']}-{st['prompt_max']}"
        table.append((label, n / steps, (tokens - n) / steps, itl_mean, (b.t - a.t) / steps, w))
        if i < LIGHT:
            light_rows += history_rows(w, args.budget)
    fit = fit_rows(light_rows)
    print(
        f"light fit (phases 1-{LIGHT}): c0 {fit.c0 * 1e3:.2f} ms, c_decode {fit.c_decode * 1e3:.3f} ms, "
        f"c_kv {fit.c_kv * 1e9:.1f} ns/token, c_prefill {fit.c_prefill * 1e6:.0f} µs/token"
    )
    print(
        f"{'phase':>15s} {'dec/step':>8s} {'pre/step':>8s} {'ITL mean':>9s} {'period':>8s} {'light fit':>9s} {'off':>5s} {'ms/extra decoder':>16s}"
    )
    prev = None
    for c, dec, pre, y, period, w in table:
        rows = history_rows(w, args.budget)
        itl_rows = [(x, yy, wt) for x, yy, wt in rows if abs(yy - y) / y < 0.5][:1] or rows[:1]
        x = itl_rows[0][0]
        priced = fit.c0 + fit.c_decode * x[1] + fit.c_prefill * x[2] + fit.c_kv * x[3] + fit.c_attn * x[4]
        slope = f"{(y - prev[1]) / (dec - prev[0]) * 1e3:16.2f}" if prev and dec > prev[0] else f"{'':16s}"
        print(
            f"{c:>15s} {dec:8.1f} {pre:8.1f} {y * 1e3:7.1f}ms {period * 1e3:6.1f}ms {priced * 1e3:7.1f}ms "
            f"{priced / y - 1:+5.0%} {slope}"
        )
        prev = (dec, y)
    return 0


if __name__ == "__main__":
    sys.exit(main())
