"""The step fit's observations: regression rows read from a target's history of ITL, step counts and prefill times.

Every few seconds of history gives the mean ITL (a step's duration, once per decoding request), the mean step
period when the engine never idled (interval / steps), and the mean prefill time of the requests that finished.
Decoding requests per step are ITL observations per step; prefill tokens per step are scheduled tokens
(`iteration_tokens_total`) minus decode tokens; the context a decoder reads is its prompt plus half its output;
a prompt of P tokens makes P²/2 attention pairs however it is chunked.
"""

from __future__ import annotations

import math

from kvdoctor.sanity import RAW_MAX
from kvdoctor.whatif.window import Snap, delta, delta_buckets, hist_name, mean_of, quantile_of

INTERVAL_S = 5.0
MIN_ITL = 5  # ITL observations an interval needs to count
# a step no engine takes: faster than any forward pass, or longer than a scrape interval's worth of them. A row
# past these read a counter that lies (a target's poisoned _count made a step of 1e-30 s, and its simulation
# one that never ends)
MIN_STEP_S, MAX_STEP_S = 1e-4, 120.0

Row = tuple[
    list[float], float, float
]  # features (1, decoding, prefill tokens, context tokens, prefill pairs), y seconds, weight


def history_rows(snaps: list[Snap], prefill_budget: int, interval_s: float = INTERVAL_S) -> list[Row]:
    """Regression rows from consecutive intervals of the history."""
    rows: list[Row] = []
    pre_rows: list[Row] = []
    itl = hist_name(snaps[-1], "itl")
    # an interval in which no request finished has no length of its own: the history's lengths stand in
    whole = _context(snaps[0], snaps[-1], 0.0)
    whole_half = _half_prompt(snaps[0], snaps[-1])
    whole_shared = _shared(snaps[0], snaps[-1])
    i = 0
    while i < len(snaps) - 1:
        j = i + 1
        while j < len(snaps) - 1 and snaps[j].t - snaps[i].t < interval_s:
            j += 1
        a, b = snaps[i], snaps[j]
        window = snaps[i : j + 1]  # by index: a scan of the whole history per interval is quadratic in it
        i = j
        if b.get("vllm:generation_tokens_total", 0) < a.get("vllm:generation_tokens_total", 0):
            continue  # restart inside the interval
        steps = delta(a, b, "vllm:iteration_tokens_total_count")
        n_itl = delta(a, b, f"{itl}_count")
        if steps < 3 or n_itl < MIN_ITL:
            continue
        tokens = delta(a, b, "vllm:iteration_tokens_total_sum")
        decoding = n_itl / steps
        per_request = _context(a, b, whole)
        prefix = min(_shared(a, b) or whole_shared, per_request)
        half = _half_prompt(a, b) or whole_half
        # iteration_tokens counts a prompt once, at its first token: a preempted request's recompute is not in
        # it, so add what each preemption costs again (its context so far, on average)
        recompute = delta(a, b, "vllm:num_preemptions_total") * per_request
        prefill = (max(0.0, tokens - n_itl) + recompute) / steps
        ctx = _read(decoding, per_request, prefix)
        pairs = prefill * half  # a prompt of P tokens makes P²/2 pairs however it is chunked
        y = delta(a, b, f"{itl}_sum") / n_itl
        # the ITL mean weighs each step by its decoding requests: when the batch swings (open-loop arrivals) it
        # answers for the decoder-weighted batch Σr²/Σr over the busy steps, read from the running gauge; idle
        # scrapes run no step, so they do not count (with them a light load's batch of 1 would read as 3)
        # counters and gauges are summed over a data-parallel server's engines, which step side by side: per engine,
        # the running count is its share and a step's period is the interval over its share of the steps
        engines = max(1, b.engines)
        busy = [r / engines for s in window if (r := s.get("vllm:num_requests_running", 0.0)) > 0]
        # the others running beside a prefilling request: a lone request's prefill step decodes nobody. A step's
        # prefill reaches the ITL mean only through the decoders it delays: a lone request's prefill step records
        # no ITL at all; a prefilling request shares its step with the others running
        if busy:
            beside = min(decoding, max(0.0, sum(busy) / len(busy) - 1.0))
        else:  # no scrape saw a request running, yet steps ran (vLLM's gauge shows none in the step admitting one)
            beside = min(decoding, _beside_bound(a, b, itl, max(0.0, tokens - n_itl)))
        shared = prefill * steps * beside / n_itl
        if busy:
            mean_run = sum(busy) / len(busy)
            weighted = decoding * (sum(r * r for r in busy) / sum(busy)) / mean_run
            rows.append(
                ([1.0, weighted, shared, _read(weighted, per_request, prefix), shared * half], y, n_itl)
            )
        else:
            rows.append(([1.0, decoding, shared, ctx, shared * half], y, n_itl))
        if len(busy) == len(window):
            rows.append(([1.0, decoding, prefill, ctx, pairs], (b.t - a.t) * engines / steps, steps))
        n_pre = delta(a, b, "vllm:request_prefill_time_seconds_count")
        computed = mean_of(a, b, "vllm:request_prefill_kv_computed_tokens")
        if not math.isfinite(computed):
            computed = mean_of(a, b, "vllm:request_prompt_tokens")
        # a request preempted mid-prefill counts its wait in its prefill time: only clean intervals say how long
        # a prefill takes
        clean = delta(a, b, "vllm:num_preemptions_total") == 0
        if clean and n_pre >= 1 and math.isfinite(computed) and computed <= prefill_budget:
            y_pre = mean_of(a, b, "vllm:request_prefill_time_seconds")
            n = max(computed, prefill)
            pre_rows.append(([1.0, beside, n, _read(beside, per_request, prefix), n * half], y_pre, n_pre))
    # prefill times are few (one per request) beside ITLs (one per token): weigh them as much in total, or the
    # fit would trade TTFT for ITL
    rows, pre_rows = [r for r in rows if _plausible(r)], [r for r in pre_rows if _plausible(r)]
    total, total_pre = sum(r[2] for r in rows), sum(r[2] for r in pre_rows)
    scale = total / total_pre if total_pre else 0.0
    return rows + [(x, y, w * scale) for x, y, w in pre_rows if scale > 0]


def _beside_bound(a: Snap, b: Snap, itl: str, prefill_tokens: float) -> float:
    """The most decoders the interval's prefill steps can have carried, read from its own ITL buckets (inf: they
    cannot tell).

    An interval no scrape saw running is not one without load: vLLM's gauge shows no request in the step that
    admits it, so under sparse long prompts the scrapes read 0 while 0.6 s prefills ran, and counting every decoder
    beside them priced a prompt token at half its cost (their ITLs were 24 ms). Where a prefill takes several decode
    steps (its prefill time, at least 4 median ITLs), each decoder that shared one left an ITL past half that time."""
    prefill_s, prompt = (
        mean_of(a, b, f"vllm:request_{n}") for n in ("prefill_time_seconds", "prompt_tokens")
    )
    buckets = delta_buckets(a, b, itl)
    median = quantile_of(buckets, 0.5)
    if not (math.isfinite(prefill_s) and math.isfinite(median) and prompt > 0) or prefill_s < 4 * median:
        return math.inf
    prefills = prefill_tokens / prompt
    short = max((c for le, c in buckets.items() if le <= prefill_s / 2), default=0.0)
    return (buckets.get(math.inf, 0.0) - short) / prefills if prefills >= 0.5 else math.inf


def _plausible(row: Row) -> bool:
    """A row whose step time an engine could take, from finite counts."""
    x, y, w = row
    finite = all(math.isfinite(v) and abs(v) <= RAW_MAX for v in (*x, w))
    return finite and w > 0 and MIN_STEP_S <= y <= MAX_STEP_S


def _context(a: Snap, b: Snap, fallback: float) -> float:
    """Context tokens a decoder reads on average: its prompt and half its output (fallback: none finished)."""
    p = mean_of(a, b, "vllm:request_prompt_tokens")
    g = mean_of(a, b, "vllm:request_generation_tokens")
    if not math.isfinite(p):
        return fallback
    return p + (g / 2 if math.isfinite(g) else 0.0)


def _read(decoders: float, per_request: float, prefix: float) -> float:
    """Context tokens that many decoders read a step: each its own, a shared prefix once."""
    return decoders * (per_request - prefix) + prefix * min(decoders, 1.0)


def _shared(a: Snap, b: Snap) -> float:
    """Prompt tokens a request finds in the prefix cache on average: a shared prefix, read once a step however many
    decoders hold it (the simulator counts it so too)."""
    queries = delta(a, b, "prefix_queries")
    p = mean_of(a, b, "vllm:request_prompt_tokens")
    return delta(a, b, "prefix_hits") / queries * p if queries > 0 and math.isfinite(p) else 0.0


def _half_prompt(a: Snap, b: Snap) -> float:
    """E[P²] / 2E[P] over the interval's prompts, uniform within each bucket: prefill pairs per prefill token."""
    buckets = sorted(delta_buckets(a, b, "vllm:request_prompt_tokens").items())
    lo, prev, sq, lin = 0.0, 0.0, 0.0, 0.0
    for hi, cum in buckets:
        n = cum - prev
        if n > 0 and math.isfinite(hi):
            sq += n * (lo * lo + lo * hi + hi * hi) / 3
            lin += n * (lo + hi) / 2
        prev, lo = cum, hi
    if lin <= 0:
        return 0.0
    mean = mean_of(a, b, "vllm:request_prompt_tokens")
    scale = mean / (lin / prev) if math.isfinite(mean) and prev > 0 else 1.0
    return sq / lin / 2 * scale
