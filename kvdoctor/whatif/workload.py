"""The workload and the engine a window of metrics shows: arrivals or a population, lengths, prefix hits, settings."""

from __future__ import annotations

import math
import statistics

from kvdoctor.errors import InputError
from kvdoctor.sanity import RAW_MAX
from kvdoctor.whatif import spec
from kvdoctor.whatif.model import Engine, LengthDist, Workload
from kvdoctor.whatif.plateau import PERSISTENT_QUEUE, plateau, uneven
from kvdoctor.whatif.profile import arrival_profile, describe
from kvdoctor.whatif.slo import number
from kvdoctor.whatif.window import Snap, deferred, delta, delta_buckets, mean_of

HELD = 0.75  # share of scrapes with running + waiting within 10 % of its median for a fixed population
CEILING = 0.15  # share of scrapes at the highest running + waiting seen for a ceiling (a client population)
NEAR_CEILING = 0.6  # … and within one request of it
SUB_BINS = 8
# Where vLLM does not export a setting, the V1 SchedulerConfig fallback (CPU backend too); stated when used.
DEFAULT_MAX_NUM_SEQS = 128
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
# Bounds on one simulation's work and memory: every arrival is a request object held to the end. A request counter
# off by 10^6 once made a what-if run past 40 s and 1.5 GB; the real servers recorded stay far below these.
MAX_SIM_REQUESTS = 50_000  # arrivals one open-loop simulation generates (warm-up included)
MAX_POPULATION = 5_000  # clients of a closed loop
MIN_BOUNDED_S = 20.0  # a simulation shortened to fit MAX_SIM_REQUESTS must still measure this long


class WindowError(InputError):
    """A window the what-if cannot learn from; the message names the window."""


def length_dist(buckets: dict[float, float], mean: float) -> LengthDist:
    """An empirical length distribution with the histogram's bucket counts and its exact mean (_sum/_count).

    Within a bucket the density is tilted exponentially, one tilt for all buckets, found so the mean matches:
    vLLM's 1-2-5 buckets are too coarse for a uniform fill to keep the mean.
    """
    items = sorted(buckets.items())
    total = items[-1][1] if items else 0.0
    if total <= 0:
        raise WindowError("no finished request in the window to learn lengths from")
    spans = []
    low, prev = 0.0, 0.0
    for le, cum in items:
        high = le if math.isfinite(le) else max(low * 2, low + 1)
        if cum - prev > 0:
            spans.append((low, high, (cum - prev) / total))
        low, prev = (le if math.isfinite(le) else high), cum

    def mean_at(beta: float) -> float:
        return sum(p * (lo + (hi - lo) * _tilted_mean(beta)) for lo, hi, p in spans)

    beta = 0.0
    if math.isfinite(mean):
        lo_b, hi_b = -40.0, 40.0
        for _ in range(60):
            beta = (lo_b + hi_b) / 2
            if mean_at(beta) < mean:
                lo_b = beta
            else:
                hi_b = beta
    bounds = []
    cum = 0.0
    for lo, hi, p in spans:
        edges = [_tilted_cdf(beta, j / SUB_BINS) for j in range(SUB_BINS + 1)]
        for j in range(SUB_BINS):
            cum += p * (edges[j + 1] - edges[j])
            w = (hi - lo) / SUB_BINS
            bounds.append((lo + j * w, lo + (j + 1) * w, min(1.0, cum)))
    return LengthDist(tuple(bounds), mean_at(beta))


def _tilted_mean(beta: float) -> float:
    if abs(beta) < 1e-6:
        return 0.5
    return 1 / (1 - math.exp(-beta)) - 1 / beta


def _tilted_cdf(beta: float, u: float) -> float:
    if abs(beta) < 1e-6:
        return u
    return math.expm1(beta * u) / math.expm1(beta)


def infer_workload(snaps: list[Snap]) -> Workload:
    """Open-loop arrival rate, or a closed-loop population when running + waiting stays flat under a queue."""
    a, b = snaps[0], snaps[-1]
    dt = b.t - a.t
    done = delta(a, b, "vllm:request_success_total")
    if dt <= 0 or done < 5:
        raise WindowError(f"only {done:.0f} requests finished in {dt:.0f} s; the what-if needs at least 5")
    prompt = length_dist(
        delta_buckets(a, b, "vllm:request_prompt_tokens"), mean_of(a, b, "vllm:request_prompt_tokens")
    )
    output = length_dist(
        delta_buckets(a, b, "vllm:request_generation_tokens"), mean_of(a, b, "vllm:request_generation_tokens")
    )
    queries = delta(a, b, "prefix_queries")
    hit = delta(a, b, "prefix_hits") / queries if queries > 0 else 0.0
    computed = _computed(a, b) if hit > 0 else None
    running = [s.get("vllm:num_requests_running", 0.0) for s in snaps]
    waiting = [s.get("vllm:num_requests_waiting", 0.0) for s in snaps]
    inside = [r + w for r, w in zip(running, waiting, strict=True)]
    queued = sum(1 for w in waiting if w > 0) / len(waiting)
    med = statistics.median(inside)
    held = sum(1 for x in inside if abs(x - med) <= 0.1 * med) / len(inside) if med > 0 else 0.0
    k = max(1, len(inside) // 6)
    trend = statistics.fmean(inside[-k:]) - statistics.fmean(inside[:k])  # ends averaged against noise
    # a queue that grows by a tenth of its level is arrivals outpacing completions, not clients waiting for answers
    if queued >= PERSISTENT_QUEUE and held >= HELD and trend < 0.1 * med:
        n = max(1, round(med))
        why = (
            f"closed loop: running + waiting held at {n} in {held:.0%} of scrapes while requests waited in "
            f"{queued:.0%} of them, so clients wait for answers; more capacity raises their rate"
        )
        return Workload("closed", done / dt, n, 0.0, prompt, output, hit, why, computed)
    top = max(inside)
    at_top = sum(1 for x in inside if x >= top) / len(inside)
    near_top = sum(1 for x in inside if x >= top - 1) / len(inside)
    if top >= 1 and at_top >= CEILING and near_top >= NEAR_CEILING:
        n = round(top)
        e2e = mean_of(a, b, "vllm:e2e_request_latency_seconds")
        # a request is at least as long as it stays in the engine (Little's law on running + waiting): a shorter
        # e2e mean is the window's own bias (the requests that finished in it, where the clients move in waves)
        in_engine = statistics.fmean(inside) / (done / dt)
        think = max(0.0, n / (done / dt) - (max(e2e, in_engine) if math.isfinite(e2e) else in_engine))
        why = (
            f"closed loop: running + waiting never above {n} and at it in {at_top:.0%} of scrapes, so {n} "
            f"clients wait for answers (≈{think:.2g} s between an answer and the next request)"
        )
        return Workload("closed", done / dt, n, think, prompt, output, hit, why, computed)
    rate = (done + max(0.0, trend)) / dt  # a growing queue adds arrivals not yet finished
    reason = (
        f"requests waited in only {queued:.0%} of scrapes"
        if queued < PERSISTENT_QUEUE
        else f"running + waiting was near its median in only {held:.0%} of scrapes"
    )
    why = f"open loop at {rate:.3g} req/s: {reason}, so arrivals do not wait for answers"
    shape = arrival_profile(snaps)
    if shape:
        why += f"; {describe(shape, rate)}"
    span = snaps[-1].t - snaps[0].t if shape else 0.0
    return Workload(
        "open", rate, 0, 0.0, prompt, output, hit, why, computed, profile=shape, profile_span_s=span
    )


def _computed(a: Snap, b: Snap) -> LengthDist | None:
    """The prompt tokens each request computed beyond its prefix-cache hits (None where not exported)."""
    name = "vllm:request_prefill_kv_computed_tokens"
    buckets = delta_buckets(a, b, name)
    return length_dist(buckets, mean_of(a, b, name)) if buckets.get(math.inf, 0.0) > 0 else None


def bound_duration(
    workloads: list[tuple[Workload, int]], duration_s: float, warmup_s: float
) -> tuple[float, str | None]:
    """The simulated seconds for (workload, replicas) pairs within MAX_SIM_REQUESTS arrivals, and a note if cut.

    An open loop beyond the cap is sampled: fewer seconds of the same traffic. WindowError when even
    MIN_BOUNDED_S would pass the cap, or a closed loop has more than MAX_POPULATION clients.
    """
    rate = 0.0
    for w, replicas in workloads:
        per_engine = w.rate_per_s / max(1, replicas)
        if w.kind == "closed" and w.population / max(1, replicas) > MAX_POPULATION:
            raise WindowError(
                f"a closed loop of {w.population} clients is more than the what-if simulates "
                f"({MAX_POPULATION} per engine): are running/waiting exported right?"
            )
        if w.kind == "open":
            rate = max(rate, per_engine)
    if rate * (warmup_s + duration_s) <= MAX_SIM_REQUESTS:
        return duration_s, None
    bounded = MAX_SIM_REQUESTS / rate - warmup_s
    if not math.isfinite(bounded) or bounded < MIN_BOUNDED_S:
        raise WindowError(
            f"{rate:.3g} requests/s per engine would need more than {MAX_SIM_REQUESTS} simulated requests for "
            f"{MIN_BOUNDED_S:g} s after the warm-up; is the request counter right?"
        )
    return bounded, (
        f"{rate:.3g} requests/s per engine: simulated {bounded:.0f} s instead of {duration_s:.0f} s "
        f"to stay within {MAX_SIM_REQUESTS} simulated requests"
    )


def info_count(info: dict[str, str], key: str, default: str) -> int:
    """A count cache_config_info gives as a label (block_size, num_gpu_blocks): a whole number from 1 up."""
    raw = info.get(key, default)
    value = number(raw)
    if value is None or not (math.isfinite(value) and 1 <= value <= RAW_MAX):
        raise WindowError(
            f"vllm:cache_config_info {key}={raw[:40]!r} is no count of blocks or tokens an engine has"
        )
    return int(value)


def infer_engine(
    snaps: list[Snap], max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None
) -> tuple[Engine, list[str]]:
    """The engine's settings from cache_config_info and the plateau of running, with what had to be assumed."""
    notes: list[str] = []
    info = snaps[-1].info
    if not info:
        raise WindowError("no vllm:cache_config_info in the window: the cache size is unknown")
    if not (info.get("num_gpu_blocks") or "").strip():
        raise WindowError("vllm:cache_config_info has no num_gpu_blocks")
    block, blocks = info_count(info, "block_size", "16"), info_count(info, "num_gpu_blocks", "0")
    tokens, conc = info.get("kv_cache_size_tokens"), info.get("kv_cache_max_concurrency")
    max_len = 0
    try:
        if tokens and conc and float(conc) > 0:
            max_len = round(float(tokens) / float(conc))
    except (ValueError, OverflowError):  # no number, or no finite one (`inf`)
        max_len = 0
    if not 0 < max_len <= blocks * block:  # none, or longer than the cache the info names: no engine's
        max_len = 0
    if not max_len:
        max_len = blocks * block
        notes.append(f"max_model_len not exported; taken as the cache size, {max_len} tokens")
    if v0_engine(snaps):
        notes.insert(0, V0_NOTE)
    held_back = statistics.fmean(deferred(s) for s in snaps)
    if held_back >= 0.5:
        notes.append(
            f"{held_back:.3g} requests waited deferred on average (a LoRA adapter's slot, a KV transfer): the "
            "simulation has no such constraint and serves them as the others"
        )
    engines = max(1, snaps[-1].engines)
    shares = uneven(snaps)
    if shares:
        notes.append(shares)
    if max_num_seqs is None:
        max_num_seqs = plateau(snaps, engines)
        if max_num_seqs is None:
            max_num_seqs = DEFAULT_MAX_NUM_SEQS
            notes.append(
                f"max_num_seqs not exported and no batch-cap plateau seen: vLLM's default {max_num_seqs}"
            )
        else:
            notes.append(f"max_num_seqs {max_num_seqs}: running held there while requests waited")
    if max_num_batched_tokens is None:
        max_num_batched_tokens = DEFAULT_MAX_NUM_BATCHED_TOKENS
        notes.append(f"max_num_batched_tokens not exported: vLLM's default {max_num_batched_tokens}")
    caching = info.get("enable_prefix_caching", "True").strip().lower() not in ("false", "0", "no")
    if not caching:
        notes.append(
            "prefix caching off (cache_config_info enable_prefix_caching=False): every prompt computed"
        )
    engine = Engine(
        max_num_seqs, max_num_batched_tokens, blocks, block, max_len, enable_prefix_caching=caching
    )
    speculation = spec.read(snaps)
    if speculation is not None:
        engine = spec.measured(engine, speculation)
        notes.append(spec.describe(speculation))
    return engine, notes


V0_NOTE = (
    "vLLM's V0 engine, by its metrics (no prefix-cache counters, which every V1 engine exports): this simulates "
    "V1's scheduler, and V0 runs prefills in steps of their own and preempts otherwise, so expect even the "
    "unchanged prediction to be far off"
)


def v0_engine(snaps: list[Snap]) -> bool:
    """Whether the server runs vLLM's V0 engine (before 0.10 on CPU): V1 registers its prefix-cache counters at
    start, caching on or off, and V0 never has them."""
    return all(math.isnan(s.get("prefix_queries")) for s in snaps)
