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
    "itl_batch_baseline_s": "kvdoctor:itl_seconds:batch_baseline",
    "prefill_tokens_per_s": "kvdoctor:prefill_tokens:rate1m",
    "prefill_decode_ratio": "kvdoctor:prefill_decode:ratio1m",
    "window_scrapes_1m": "kvdoctor:window:ready",
    "requests_max_20s": "kvdoctor:requests:max20s",
    "quiet": "kvdoctor:quiet",
    "waiting_p25_1m": "kvdoctor:waiting:p25_1m",
    "waiting_deferred": "kvdoctor:waiting_deferred",
    "imbalance_pressed_running": "kvdoctor:engine_imbalance:pressed_running",
}
# per-engine signals (label `engine`; one engine without it), kept apart from the target's evidence
ENGINE_SIGNALS: dict[str, str] = {
    "running_avg_1m": "kvdoctor:engine_running:avg1m",
    "running_max_1m": "kvdoctor:engine_running:max1m",
    "waiting_avg_1m": "kvdoctor:engine_waiting:avg1m",
    "waiting_max_1m": "kvdoctor:engine_waiting:max1m",
    "kv_usage_max_1m": "kvdoctor:engine_kv_usage:max1m",
    "preemptions_per_s": "kvdoctor:engine_preemptions:rate1m",
    "kv_bound": "kvdoctor:engine_kv_bound:max30s",
    "batch_cap_plateau": "kvdoctor:engine_batch_cap:plateau",
    "pressed": "kvdoctor:engine_pressed:running_avg1m",
    "room": "kvdoctor:engine_room:running_avg1m",
    "requests_min_30s": "kvdoctor:engine_requests:min30s",
    "tokens_moved_30s": "kvdoctor:engine_tokens:moved30s",
    "gauge_changes_30s": "kvdoctor:engine_gauges:changes30s",
    "stalled_requests": "kvdoctor:engine_stalled:requests",
}
ENGINE_PREFIX = "engine/"  # evidence keys "engine/<engine>/<key>" until the classifier splits them off
# per-instance signals (no model_name)
INSTANCE_SIGNALS: dict[str, str] = {
    "batch_cap_configured": "kvdoctor:batch_cap:configured",
    "slo_itl_p95_s": "kvdoctor:slo_itl_p95_seconds",
    "slo_ttft_p95_s": "kvdoctor:slo_ttft_p95_seconds",
}
_BY_RULE = {rule: key for key, rule in SIGNALS.items()}
_BY_RULE_INSTANCE = {rule: key for key, rule in INSTANCE_SIGNALS.items()}
_BY_RULE_ENGINE = {rule: key for key, rule in ENGINE_SIGNALS.items()}

# what decides each finding, in display order
EVIDENCE_FOR: dict[str, tuple[str, ...]] = {
    "kv_cache": ("kv_usage_max_30s", "kv_usage_max_1m", "waiting_avg_1m", "preemptions_per_s", "running_avg_1m",
                 "ttft_p95_s", "queue_time_p95_s"),
    "batch_cap": ("running_max_1m", "batch_cap_configured", "batch_cap_inferred", "waiting_avg_1m", "kv_usage_max_1m",
                  "preemptions_per_s", "ttft_p95_s", "queue_time_p95_s"),
    "compute": ("itl_p50_s", "itl_p95_s", "itl_baseline_s", "itl_batch_baseline_s", "slo_itl_p95_s", "ttft_p95_s",
                "slo_ttft_p95_s", "running_avg_1m", "waiting_avg_1m", "kv_usage_max_1m", "generation_tokens_per_s",
                "prefill_decode_ratio"),
    "preemption_storm": ("preemptions_per_s", "requests_per_s", "kv_usage_max_1m"),
    "prefix_cache_low_hit_rate": ("prefix_cache_hit_ratio", "prompt_tokens_p50"),
    "spec_decode_low_acceptance": ("spec_decode_acceptance",),
    "spec_decode_high_load": ("running_avg_1m", "itl_p50_s", "itl_baseline_s"),
    "engine_imbalance": ("imbalance_pressed_running", "waiting_avg_1m", "running_avg_1m"),
    "stalled": ("running", "waiting", "waiting_deferred", "kv_usage", "prompt_tokens_p99"),
}  # fmt: skip


def collect(series: Iterable[tuple[Labels, float]]) -> dict[Key, dict[str, float]]:
    """Group (labels, value) pairs of kvdoctor:* series into evidence dicts per (instance, model_name).

    Per-engine signals land under "engine/<engine>/<key>" (split off by `engines()`).
    """
    per_key: dict[Key, dict[str, float]] = {}
    per_instance: dict[str, dict[str, float]] = {}
    for labels, value in series:
        d = dict(labels)
        name = d.get("__name__", "")
        if name in _BY_RULE_ENGINE and "instance" in d:
            key = f"{ENGINE_PREFIX}{d.get('engine', '')}/{_BY_RULE_ENGINE[name]}"
            per_key.setdefault((d["instance"], d.get("model_name", "")), {})[key] = value
        elif name in _BY_RULE and "instance" in d:
            per_key.setdefault((d["instance"], d.get("model_name", "")), {})[_BY_RULE[name]] = value
        elif name in _BY_RULE_INSTANCE and "instance" in d:
            per_instance.setdefault(d["instance"], {})[_BY_RULE_INSTANCE[name]] = value
    for (instance, _), values in per_key.items():
        values.update(per_instance.get(instance, {}))
    return per_key


def engines(ev: dict[str, float]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Split a collected evidence dict into the target's own keys and {engine: {key: value}}."""
    own: dict[str, float] = {}
    per: dict[str, dict[str, float]] = {}
    for k, v in ev.items():
        if k.startswith(ENGINE_PREFIX):
            engine, _, key = k[len(ENGINE_PREFIX) :].partition("/")
            per.setdefault(engine, {})[key] = v
        else:
            own[k] = v
    return own, dict(sorted(per.items(), key=lambda kv: (len(kv[0]), kv[0])))
