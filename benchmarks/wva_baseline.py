"""The WVA (llm-d workload-variant-autoscaler) SLO analyzer's queueing model, as its published description states it.

The model (WVA's `pkg/analyzer`, docs "Workload Variant Autoscaler: Under the hood"): one replica is a
state-dependent M/M/1/K queue. With n requests in service (n ≤ N = max batch size) a request's service time is
prefill(n) + (out − 1)·decode(n), with decode(n) = α + β·n (the ITL) and prefill(n) = γ + δ·in·n, so the state's
service rate is μ(n) = n / service(n); above N requests wait (up to K = N + 100·N in the system, WVA's demo size).
Solved for an arrival rate λ: TTFT = mean wait + prefill(n_eff), ITL = decode(n_eff), where n_eff is the
concurrency at which the model's mean service time is met (WVA's EffectiveConcurrency). Sizing ("the max rate that
meets a target") bisects λ up to the stability limit μ(N)·(1 − 0.001). WVA compares those means with the target,
so a p95 objective is held against the mean, as WVA does.

Fit: WVA learns α, β, γ, δ online with a Kalman filter from an offline profile as its starting state; there is
no profile here, so the same parameters are fitted by least squares (each coefficient ≥ 0) to the light step's
intervals: ITL against the mean running batch, the prefill time (vLLM's request_prefill_time) against
in·batch. The sizes (in, out) are the step's mean prompt and generation tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvdoctor.whatif.window import Snap, delta, mean_of

EPSILON = 0.001  # WVA: the stability limit is this fraction below the full-batch service rate
QUEUE_FACTOR = 100  # WVA demo: max queue size 100 × max batch size
INTERVAL_S = 9.0  # the fit's intervals: a few scrapes each, enough ITL observations to average


@dataclass(frozen=True)
class Params:
    """decode(n) = alpha + beta·n, prefill(n) = gamma + delta·in·n (seconds); the request sizes."""

    alpha: float
    beta: float
    gamma: float
    delta: float
    avg_in: float
    avg_out: float
    max_batch: int

    def decode(self, n: float) -> float:
        """Seconds per output token with n requests in service."""
        return self.alpha + self.beta * n

    def prefill(self, n: float) -> float:
        """Seconds of prefill (first token) with n requests in service."""
        return self.gamma + self.delta * self.avg_in * n

    def service(self, n: float) -> float:
        """A request's whole service time with n in service."""
        return self.prefill(n) + max(1.0, self.avg_out - 1) * self.decode(n)


@dataclass(frozen=True)
class Solution:
    """Means of the solved queue at one arrival rate (seconds, requests/s)."""

    rate: float
    wait_s: float
    ttft_s: float
    itl_s: float
    in_service: float


def _nonneg_line(xs: list[float], ys: list[float], ws: list[float]) -> tuple[float, float]:
    """Weighted least squares y = a + b·x with a, b ≥ 0 (a slope < 0 refits the mean alone)."""
    sw = sum(ws)
    mx = sum(w * x for x, w in zip(xs, ws, strict=True)) / sw
    my = sum(w * y for y, w in zip(ys, ws, strict=True)) / sw
    sxx = sum(w * (x - mx) ** 2 for x, w in zip(xs, ws, strict=True))
    sxy = sum(w * (x - mx) * (y - my) for x, y, w in zip(xs, ys, ws, strict=True))
    b = sxy / sxx if sxx > 0 else 0.0
    if b <= 0:
        return max(my, 0.0), 0.0
    a = my - b * mx
    if a < 0:  # through the origin instead
        b = sum(w * x * y for x, y, w in zip(xs, ys, ws, strict=True)) / sum(
            w * x * x for x, w in zip(xs, ws, strict=True)
        )
        a = 0.0
    return a, b


def fit(window: list[Snap], max_batch: int, interval_s: float = INTERVAL_S) -> Params:
    """α, β, γ, δ from the window's intervals (ITL vs batch, prefill time vs in·batch), sizes from its means."""
    a, b = window[0], window[-1]
    avg_in = mean_of(a, b, "vllm:request_prompt_tokens")
    avg_out = mean_of(a, b, "vllm:request_generation_tokens")
    itl_x, itl_y, itl_w, pre_x, pre_y, pre_w = [], [], [], [], [], []
    i = 0
    while i < len(window) - 1:
        j = i + 1
        while j < len(window) - 1 and window[j].t - window[i].t < interval_s:
            j += 1
        s, e = window[i], window[j]
        # the batch a token or a prefill saw: running while anything ran (an ITL needs a request in service)
        busy = [r for x in window[i : j + 1] if (r := x.get("vllm:num_requests_running", 0.0)) > 0]
        n = max(1.0, sum(busy) / len(busy)) if busy else 1.0
        n_itl = delta(s, e, "vllm:inter_token_latency_seconds_count")
        if n_itl > 0:
            itl_x.append(n)
            itl_y.append(delta(s, e, "vllm:inter_token_latency_seconds_sum") / n_itl)
            itl_w.append(n_itl)
        n_pre = delta(s, e, "vllm:request_prefill_time_seconds_count")
        if n_pre > 0:
            pre_x.append(avg_in * n)
            pre_y.append(delta(s, e, "vllm:request_prefill_time_seconds_sum") / n_pre)
            pre_w.append(n_pre)
        i = j
    if not itl_x or not pre_x or not math.isfinite(avg_in) or not math.isfinite(avg_out):
        raise ValueError("the window has no finished request to fit the WVA model to")
    alpha, beta = _nonneg_line(itl_x, itl_y, itl_w)
    gamma, dlt = _nonneg_line(pre_x, pre_y, pre_w)
    return Params(alpha, beta, gamma, dlt, avg_in, avg_out, max_batch)


def solve(p: Params, rate: float) -> Solution:
    """The state-dependent M/M/1/K queue at an arrival rate: mean wait, TTFT, ITL (WVA's Analyze)."""
    n_max = p.max_batch
    k = n_max + QUEUE_FACTOR * n_max
    mu = [n / p.service(n) for n in range(1, n_max + 1)]
    # state probabilities in log space: p(n) ∝ Π λ/μ(min(i, N))
    logs, acc = [0.0], 0.0
    for n in range(1, k + 1):
        acc += math.log(rate) - math.log(mu[min(n, n_max) - 1])
        logs.append(acc)
    top = max(logs)
    probs = [math.exp(v - top) for v in logs]
    total = sum(probs)
    probs = [v / total for v in probs]
    throughput = rate * (1 - probs[k])
    in_system = sum(n * v for n, v in enumerate(probs))
    queued = sum((n - n_max) * v for n, v in enumerate(probs) if n > n_max)
    wait = queued / throughput
    serv = (in_system - queued) / throughput
    tokens = max(1.0, p.avg_out - 1)
    # WVA's EffectiveConcurrency: the n whose prefill + decodes take the mean service time
    num = serv - (p.gamma + p.alpha * tokens)
    den = p.delta * p.avg_in + p.beta * tokens
    n_eff = min(max(num / den if den > 0 else 0.0, 0.0), float(n_max))
    return Solution(rate, wait, wait + p.prefill(n_eff), p.decode(n_eff), in_system - queued)


def max_rate(p: Params) -> float:
    """The stability limit WVA sizes up to: the full-batch service rate, a hair below."""
    return p.max_batch / p.service(p.max_batch) * (1 - EPSILON)


def value(sol: Solution, key: str) -> float:
    """The model's value for an SLO key: TTFT and queue time are its mean wait (+ prefill), ITL its decode time."""
    if key.startswith("ttft"):
        return sol.ttft_s
    if key.startswith("itl"):
        return sol.itl_s
    return sol.wait_s


def breaking_rate(p: Params, key: str, objective: float) -> float:
    """The arrival rate at which the SLO breaks (WVA's Size: bisect λ; the stability limit if never before it)."""
    hi = max_rate(p)
    lo = hi * EPSILON
    if value(solve(p, lo), key) > objective:
        return lo
    if value(solve(p, hi), key) <= objective:
        return hi
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if value(solve(p, mid), key) <= objective else (lo, mid)
    return (lo + hi) / 2
