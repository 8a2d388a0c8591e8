"""The keys `whatif --json` and `plan --json` promise for a side's quantities: written out once, as users read them."""

from __future__ import annotations

# What each side (measured, predicted_unchanged, predicted, a plan candidate's predicted) carries.
Q_KEYS = {
    "ttft_p50_s",
    "ttft_p95_s",
    "itl_p50_s",
    "itl_p95_s",
    "queue_time_p95_s",
    "generation_tokens_per_s",
    "requests_per_s",
    "running",
    "waiting",
    "kv_usage_max",
    "preemptions_per_s",
    "bottleneck",
}
# What a simulated side adds: whether the arrivals outrun what the configuration serves, and by how much.
SATURATION_KEYS = {
    "overloaded",
    "arrivals_requests_per_s",
    "capacity_requests_per_s",
    "capacity_generation_tokens_per_s",
    "capacity_requests_per_s_per_replica",
    "capacity_generation_tokens_per_s_per_replica",
    "queue_growth_requests_per_s",
    "ttft_growth_s_per_minute",
    "ttft_reaches_s",
    "ttft_reaches_after_s",
    "arrivals_at_peak",
    "duration_dependent",
}
