"""Past saturation: an open-loop load the configuration cannot serve, told as its capacity and how fast the queue grows.

Once arrivals outpace completions the queue has no steady length: its TTFT quantiles only say how long the
simulation ran. What does not depend on that is the completion rate of the engine with a queue that never empties
(its capacity), the rate the queue grows at, and so how fast TTFT climbs while the overload lasts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvdoctor.jsondoc import JsonObject
from kvdoctor.whatif.model import SimResult, Workload

MARGIN = 0.05  # arrivals this far above completions, and a queue growing by this share of them: not noise
QUEUED_FOR = 0.1  # a window's busiest part overloads where requests waited this share of the run at least
TTFT_REACH_S = 10.0  # the TTFT whose time to reach the output states when no SLO names one
# quantities with no steady value past saturation: they grow with the time simulated
DURATION_DEPENDENT = ("ttft_p50_s", "ttft_p95_s", "queue_time_p95_s", "waiting")


@dataclass(frozen=True)
class Overload:
    """An open-loop load above what the engines complete: arrivals, capacity, and what grows (totals over replicas)."""

    arrivals_per_s: float
    capacity_requests_per_s: float
    capacity_generation_tokens_per_s: float
    replicas: int
    reach_s: float = TTFT_REACH_S
    # the arrivals of the window's busiest part (`Workload.profile`): the overload lasts while that rate does
    at_peak: bool = False

    @property
    def queue_growth_per_s(self) -> float:
        """Requests the queue gains per second while the overload lasts."""
        return max(0.0, self.arrivals_per_s - self.capacity_requests_per_s)

    @property
    def ttft_growth_per_min(self) -> float:
        """Seconds of TTFT a request arriving one minute later waits more: the queue ahead of it is longer."""
        cap = self.capacity_requests_per_s
        return 60.0 * self.queue_growth_per_s / cap if cap > 0 else math.inf

    @property
    def reach_after_s(self) -> float:
        """Seconds into the overload after which a new request waits reach_s for its first token."""
        g = self.ttft_growth_per_min / 60.0
        return self.reach_s / g if g > 0 else math.inf

    def to_dict(self) -> JsonObject:
        """The `--json` keys, next to a prediction's quantities."""
        n = self.replicas
        return {
            "overloaded": True,
            "arrivals_requests_per_s": _r(self.arrivals_per_s),
            "capacity_requests_per_s": _r(self.capacity_requests_per_s),
            "capacity_generation_tokens_per_s": _r(self.capacity_generation_tokens_per_s),
            "capacity_requests_per_s_per_replica": _r(self.capacity_requests_per_s / n),
            "capacity_generation_tokens_per_s_per_replica": _r(self.capacity_generation_tokens_per_s / n),
            "queue_growth_requests_per_s": _r(self.queue_growth_per_s),
            "ttft_growth_s_per_minute": _r(self.ttft_growth_per_min),
            "ttft_reaches_s": self.reach_s,
            "ttft_reaches_after_s": _r(self.reach_after_s),
            "arrivals_at_peak": self.at_peak,
            "duration_dependent": list(DURATION_DEPENDENT),
        }

    def line(self) -> str:
        """One line for the text output and the advice."""
        peak = " in the window's busiest part" if self.at_peak else ""
        return (
            f"overloaded: arrivals {self.arrivals_per_s:.3g} req/s{peak} > capacity "
            f"{self.capacity_requests_per_s:.3g} req/s ({self.capacity_generation_tokens_per_s:.3g} tokens/s); "
            f"the queue grows {self.queue_growth_per_s:.2g} req/s, TTFT +{self.ttft_growth_per_min:.2g} s per "
            f"minute while it lasts (reaches {self.reach_s:g} s after {self.reach_after_s:.0f} s)"
        )


NOT_OVERLOADED: JsonObject = {
    "overloaded": False,
    "arrivals_requests_per_s": None,
    "capacity_requests_per_s": None,
    "capacity_generation_tokens_per_s": None,
    "capacity_requests_per_s_per_replica": None,
    "capacity_generation_tokens_per_s_per_replica": None,
    "queue_growth_requests_per_s": None,
    "ttft_growth_s_per_minute": None,
    "ttft_reaches_s": None,
    "ttft_reaches_after_s": None,
    "arrivals_at_peak": None,
    "duration_dependent": [],
}


def detect(
    res: SimResult, workload: Workload, replicas: int, reach_s: float = TTFT_REACH_S
) -> Overload | None:
    """An Overload when one replica's open-loop share arrives faster than it completes and its queue grows; where
    the window's arrivals were uneven, when its busiest part arrives faster than the engine completes with a queue."""
    span = res.span_s
    if workload.kind != "open" or span <= 0 or not res.finished:
        return None
    if workload.profile:
        return _at_peak(res, workload, replicas, reach_s)
    arrivals = workload.rate_per_s / replicas
    completed = res.finished / span  # with the queue never empty, the engine's capacity
    growth = (res.waiting_end - res.waiting_start) / span
    if arrivals <= completed * (1 + MARGIN) or growth < MARGIN * arrivals:
        return None
    return Overload(
        arrivals * replicas, completed * replicas, res.generation_tokens / span * replicas, replicas, reach_s
    )


def _at_peak(res: SimResult, workload: Workload, replicas: int, reach_s: float) -> Overload | None:
    # the run's mean completion rate understates the capacity where the queue was empty for part of it: the
    # capacity is the rate requests finished while others waited
    if res.queued_s < QUEUED_FOR * res.span_s or not res.queued_finished:
        return None
    capacity = res.queued_finished / res.queued_s
    peak = workload.rate_per_s * max(workload.profile) / replicas
    if peak <= capacity * (1 + MARGIN):
        return None
    tokens = res.generation_tokens / res.finished * capacity  # the window's requests, at that rate
    return Overload(peak * replicas, capacity * replicas, tokens * replicas, replicas, reach_s, at_peak=True)


def _r(v: float) -> float | None:
    return float(f"{v:.4g}") if math.isfinite(v) else None


def as_dict(overload: Overload | None) -> JsonObject:
    """The saturation keys of one side of a prediction: its overload, or `overloaded: false` with nulls."""
    return overload.to_dict() if overload is not None else dict(NOT_OVERLOADED, duration_dependent=[])
