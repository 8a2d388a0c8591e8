"""The evidence vocabulary: which recorded signal backs each evidence key, and how to read them per target."""

from __future__ import annotations

from collections.abc import Iterable

from doctor.samples import Labels

Key = tuple[str, str]  # (target, model_name)

# evidence key -> recording rule of the pack (per job, instance, model_name)
SIGNALS: dict[str, str] = {
    "kv_usage": "kvdoctor:kv_usage:ratio",
    "kv_usage_avg_1m": "kvdoctor:kv_usage:avg1m",
    "kv_usage_max_1m": "kvdoctor:kv_usage:max1m",
    "kv_usage_max_30s": "kvdoctor:kv_usage:max30s",
    "running": "kvdoctor:running",
    "running_avg_1m": "kvdoctor:running:avg1m",
    "running_max_1m": "kvdoctor:running:max1m",
    "waiting": "kvdoctor:waiting",
    "waiting_avg_1m": "kvdoctor:waiting:avg1m",
    "batch_cap_inferred": "kvdoctor:batch_cap:inferred",
    "preemptions_per_s": "kvdoctor:preemptions:rate1m",
    "ttft_p95_s": "kvdoctor:ttft_seconds:p95_1m",
    "itl_p50_s": "kvdoctor:itl_seconds:p50_1m",
    "itl_p95_s": "kvdoctor:itl_seconds:p95_1m",
    "itl_baseline_s": "kvdoctor:itl_seconds:baseline",
    "queue_time_p95_s": "kvdoctor:queue_time_seconds:p95_1m",
    "prefix_cache_hit_ratio": "kvdoctor:prefix_cache_hit:ratio5m",
    "spec_decode_acceptance": "kvdoctor:spec_decode_acceptance:ratio5m",
    "generation_tokens_per_s": "kvdoctor:generation_tokens:rate1m",
    "prompt_tokens_per_s": "kvdoctor:prompt_tokens:rate1m",
    "requests_per_s": "kvdoctor:requests_finished:rate1m",
    "prompt_tokens_p50": "kvdoctor:prompt_tokens:p50_5m",
    "prompt_tokens_p99": "kvdoctor:prompt_tokens:p99_5m",
    "generation_tokens_p99": "kvdoctor:generation_tokens:p99_5m",
}
# per-instance signals (no model_name)
INSTANCE_SIGNALS: dict[str, str] = {
    "batch_cap_configured": "kvdoctor:batch_cap:configured",
    "slo_itl_p95_s": "kvdoctor:slo_itl_p95_seconds",
    "slo_ttft_p95_s": "kvdoctor:slo_ttft_p95_seconds",
}
_BY_RULE = {rule: key for key, rule in SIGNALS.items()}
_BY_RULE_INSTANCE = {rule: key for key, rule in INSTANCE_SIGNALS.items()}

# what decides each finding, in display order
EVIDENCE_FOR: dict[str, tuple[str, ...]] = {
    "kv_cache": ("kv_usage_max_30s", "kv_usage_max_1m", "waiting_avg_1m", "preemptions_per_s", "running_avg_1m",
                 "ttft_p95_s", "queue_time_p95_s"),
    "batch_cap": ("running_max_1m", "batch_cap_configured", "batch_cap_inferred", "waiting_avg_1m", "kv_usage_max_1m",
                  "preemptions_per_s", "ttft_p95_s", "queue_time_p95_s"),
    "compute": ("itl_p50_s", "itl_p95_s", "itl_baseline_s", "slo_itl_p95_s", "running_avg_1m", "waiting_avg_1m",
                "kv_usage_max_1m", "generation_tokens_per_s"),
    "preemption_storm": ("preemptions_per_s", "requests_per_s", "kv_usage_max_1m"),
    "prefix_cache_low_hit_rate": ("prefix_cache_hit_ratio", "prompt_tokens_p50"),
    "spec_decode_low_acceptance": ("spec_decode_acceptance",),
    "spec_decode_high_load": ("running_avg_1m", "itl_p50_s", "itl_baseline_s"),
}  # fmt: skip


def collect(series: Iterable[tuple[Labels, float]]) -> dict[Key, dict[str, float]]:
    """Group (labels, value) pairs of kvdoctor:* series into evidence dicts per (instance, model_name)."""
    per_key: dict[Key, dict[str, float]] = {}
    per_instance: dict[str, dict[str, float]] = {}
    for labels, value in series:
        d = dict(labels)
        name = d.get("__name__", "")
        if name in _BY_RULE and "instance" in d:
            per_key.setdefault((d["instance"], d.get("model_name", "")), {})[_BY_RULE[name]] = value
        elif name in _BY_RULE_INSTANCE and "instance" in d:
            per_instance.setdefault(d["instance"], {})[_BY_RULE_INSTANCE[name]] = value
    for (instance, _), values in per_key.items():
        values.update(per_instance.get(instance, {}))
    return per_key
