"""The one registry of signals and findings: every evidence key, where it comes from and how each sink shows it.

Exposition (kvdoctor_* gauges), evidence text, history for the page's charts, Slack fields, the page's labels
(served at /api/v1/signals) and the classifier's reading of the rule pack all derive from SIGNALS and FINDINGS.
A new signal is one entry here plus its recording rule in rules/kvdoctor.yml.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdoctor.jsondoc import JsonObject

UNITS = ("pct", "count", "rate", "seconds", "tok/s", "tokens", "plain")


@dataclass(frozen=True)
class Signal:
    """One evidence key: the recorded series behind it and how it is named and shown."""

    key: str
    label: str  # in text, Slack fields and /metrics help
    unit: str  # one of UNITS
    rule: str = ""  # recording rule of the pack ("" when kvdoctor computes it, e.g. from cache_config_info)
    per_instance: bool = False  # the rule has no model_name label (facts about the server)
    per_engine: bool = (
        False  # the rule keeps the data-parallel `engine` label (read per engine, not per target)
    )
    short: str = ""  # the status page's compact label (default: label)
    metric: str = ""  # kvdoctor_* gauge on /metrics ("" = not exposed)
    help: str = ""  # its HELP text
    history: bool = False  # kept per evaluation for the status page's charts
    chart: str = ""  # title of the status page's chart that draws it ("" = none; needs history)
    chart_style: str = ""  # "fill" (area under the line), "dash" (a limit drawn dashed, only when present)
    chart_line: str = ""  # evidence key drawn on the same chart as a horizontal line (an SLO)
    summary: bool = False  # shown in the one-line evidence of a report or timeline

    def to_dict(self) -> JsonObject:
        """JSON-ready, with the page label filled in."""
        return {**self.__dict__, "short": self.short or self.label}


@dataclass(frozen=True)
class FindingKind:
    """One finding the rule pack (or kvdoctor) can raise: the evidence that decides it, in display order."""

    name: str
    evidence: tuple[str, ...] = ()
    title: str = ""  # short title for messages (default: the name in words)
    # Findings kvdoctor raises itself (kvdoctor/diagnosis/classify.py), which have no rule annotations to carry these;
    # pack findings take theirs from their alerting rule. The runbook (/runbook) shows both.
    severity: str = ""
    meaning: str = ""
    advice: str = ""

    def display_title(self) -> str:
        """The title, or the name in words."""
        return self.title or self.name.replace("_", " ").capitalize()


def _signals(*items: Signal) -> dict[str, Signal]:
    return {s.key: s for s in items}


# A data table, one Signal a line as the registry reads best (fmt: skip keeps ruff from splitting it).
SIGNALS: dict[str, Signal] = _signals(
    Signal("kv_usage", "KV cache usage", "pct", "kvdoctor:kv_usage:ratio", short="KV usage",
           metric="kvdoctor_kv_cache_usage_ratio", help="KV-cache usage 0-1 (rule kvdoctor:kv_usage:ratio from vllm:kv_cache_usage_perc).",
           history=True, summary=True, chart="KV cache usage", chart_style="fill"),
    Signal("kv_usage_max_30s", "KV usage, 30s peak", "pct", "kvdoctor:kv_usage:max30s", short="KV usage max 30s"),
    Signal("kv_usage_max_1m", "KV usage, 1m peak", "pct", "kvdoctor:kv_usage:max1m", short="KV usage max 1m",
           metric="kvdoctor_kv_cache_usage_max_1m_ratio", help="Peak KV-cache usage over 1m (rule kvdoctor:kv_usage:max1m)."),
    Signal("kv_usage_avg_1m", "KV usage, 1m avg", "pct", "kvdoctor:kv_usage:avg1m", short="KV usage avg 1m"),
    Signal("running", "Running", "count", "kvdoctor:running", short="running", metric="kvdoctor_requests_running",
           help="Requests in the batch (vllm:num_requests_running, summed over engines).", history=True, summary=True, chart="running vs waiting vs cap"),
    Signal("running_max_1m", "Running, 1m peak", "count", "kvdoctor:running:max1m", short="running max 1m"),
    Signal("running_avg_1m", "Running, 1m avg", "count", "kvdoctor:running:avg1m", short="running avg 1m"),
    Signal("batch_cap_configured", "Batch cap (max_num_seqs)", "count", "kvdoctor:batch_cap:configured",
           per_instance=True, short="--max-num-seqs", metric="kvdoctor_batch_cap_configured_requests",
           help="--max-num-seqs configured for the target in kvdoctor's config.", history=True, summary=True, chart="running vs waiting vs cap", chart_style="dash"),
    Signal("batch_cap_inferred", "Batch cap (inferred)", "count", "kvdoctor:batch_cap:inferred",
           short="batch cap inferred", metric="kvdoctor_batch_cap_inferred_requests",
           help="Running plateau while requests waited: the inferred --max-num-seqs (rule kvdoctor:batch_cap:inferred).",
           history=True, summary=True, chart="running vs waiting vs cap", chart_style="dash"),
    Signal("waiting", "Waiting", "count", "kvdoctor:waiting", short="waiting", metric="kvdoctor_requests_waiting",
           help="Requests waiting (vllm:num_requests_waiting, summed over engines).", history=True, summary=True, chart="running vs waiting vs cap"),
    Signal("waiting_avg_1m", "Waiting, 1m avg", "count", "kvdoctor:waiting:avg1m", short="waiting avg 1m"),
    Signal("preemptions_per_s", "Preemptions", "rate", "kvdoctor:preemptions:rate_held", short="preemptions",
           metric="kvdoctor_preemptions_per_second",
           help="Preemptions per second (rate of vllm:num_preemptions_total) over 1m, or 30s when preemption "
                "began or stopped within the minute.", summary=True),
    Signal("ttft_p95_s", "TTFT p95", "seconds", "kvdoctor:ttft_seconds:p95_1m", metric="kvdoctor_ttft_p95_seconds",
           help="Time to first token p95 over 1m (vllm:time_to_first_token_seconds).", history=True, summary=True, chart="TTFT p95", chart_line="slo_ttft_p95_s"),
    Signal("itl_p50_s", "ITL p50", "seconds", "kvdoctor:itl_seconds:p50_1m", metric="kvdoctor_itl_p50_seconds",
           help="Inter-token latency p50 over 1m (vllm:inter_token_latency_seconds).", history=True, summary=True),
    Signal("itl_p95_s", "ITL p95", "seconds", "kvdoctor:itl_seconds:p95_1m", metric="kvdoctor_itl_p95_seconds",
           help="Inter-token latency p95 over 1m (vllm:inter_token_latency_seconds)."),
    Signal("itl_baseline_s", "ITL light-load baseline", "seconds", "kvdoctor:itl_seconds:baseline",
           short="ITL baseline", metric="kvdoctor_itl_baseline_seconds",
           help="Learned light-load inter-token latency (rule kvdoctor:itl_seconds:baseline)."),
    Signal("slo_itl_p95_s", "ITL p95 SLO", "seconds", "kvdoctor:slo_itl_p95_seconds", per_instance=True),
    Signal("slo_ttft_p95_s", "TTFT p95 SLO", "seconds", "kvdoctor:slo_ttft_p95_seconds", per_instance=True),
    Signal("queue_time_p95_s", "Queue time p95", "seconds", "kvdoctor:queue_time_seconds:p95_1m",
           short="queue time p95", metric="kvdoctor_queue_time_p95_seconds",
           help="Queue time p95 over 1m (vllm:request_queue_time_seconds)."),
    Signal("prefix_cache_hit_ratio", "Prefix-cache hit rate", "pct", "kvdoctor:prefix_cache_hit:ratio5m",
           short="prefix cache hits", metric="kvdoctor_prefix_cache_hit_ratio",
           help="Prefix-cache hit ratio over 5m (vllm:prefix_cache_hits_total / queries_total)."),
    Signal("spec_decode_acceptance", "Spec-decode acceptance", "pct", "kvdoctor:spec_decode_acceptance:ratio5m",
           short="draft acceptance", metric="kvdoctor_spec_decode_acceptance_ratio",
           help="Speculative-decoding draft acceptance over 5m."),
    Signal("generation_tokens_per_s", "Generation throughput", "tok/s", "kvdoctor:generation_tokens:rate1m",
           short="generation", metric="kvdoctor_generation_tokens_per_second",
           help="Generated tokens per second over 1m.", summary=True),
    Signal("prompt_tokens_per_s", "Prompt throughput", "tok/s", "kvdoctor:prompt_tokens:rate1m", short="prompt",
           metric="kvdoctor_prompt_tokens_per_second", help="Prompt tokens per second over 1m."),
    Signal("requests_per_s", "Finished requests", "rate", "kvdoctor:requests_finished:rate1m", short="requests"),
    Signal("prompt_tokens_p50", "Prompt length p50", "tokens", "kvdoctor:prompt_tokens:p50_5m", short="prompt p50"),
    Signal("prompt_tokens_p99", "Prompt length p99", "tokens", "kvdoctor:prompt_tokens:p99_5m", short="prompt p99"),
    Signal("generation_tokens_p99", "Generation length p99", "tokens", "kvdoctor:generation_tokens:p99_5m",
           short="generation p99"),
    Signal("kv_cache_tokens", "KV cache capacity", "tokens", short="KV cache size",
           metric="kvdoctor_kv_cache_capacity_tokens", help="Tokens the engine's KV cache holds (vllm:cache_config_info)."),
    Signal("itl_batch_baseline_s", "ITL expected at this batch", "seconds", "kvdoctor:itl_seconds:batch_baseline",
           short="ITL at this batch"),
    Signal("compute_utilisation", "Tokens/s over this server's ceiling", "pct", "kvdoctor:compute_utilisation:ratio",
           short="of compute ceiling", metric="kvdoctor_compute_utilisation_ratio",
           help="Generation tokens/s over this server's own ceiling 0-1, from ITL against its light-load baseline at "
                "the batch it runs (rule kvdoctor:compute_utilisation:ratio); compute is named from 0.8."),
    Signal("itl_compute_threshold_s", "ITL from which compute is named", "seconds",
           "kvdoctor:itl_seconds:compute_threshold", short="ITL compute threshold"),
    Signal("itl_mean_30s", "ITL mean, 30s", "seconds", "kvdoctor:itl_seconds:mean30s", short="ITL mean 30s"),
    Signal("itl_mean_baseline_s", "ITL mean, light load", "seconds", "kvdoctor:itl_seconds:mean_baseline",
           short="ITL mean baseline"),
    Signal("prefix_cache_hit_ratio_30s", "Prefix-cache hit rate, 30s", "pct", "kvdoctor:prefix_cache_hit:ratio30s",
           short="prefix cache hits 30s"),
    Signal("prefill_tokens_per_s", "Prefill throughput", "tok/s", "kvdoctor:prefill_tokens:rate1m",
           short="prefill"),
    Signal("prefill_decode_ratio", "Prompt tokens computed per generated token", "plain",
           "kvdoctor:prefill_decode:ratio1m", short="prefill/decode"),
    Signal("window_scrapes_1m", "Scrapes in the 1m window", "count", "kvdoctor:window:ready", short="window"),
    Signal("requests_max_10s", "Requests seen in 10s", "count", "kvdoctor:requests:max10s", short="requests 10s"),
    Signal("quiet", "Quiet (no request or token for idle_after)", "plain", "kvdoctor:quiet", short="quiet"),
    Signal("waiting_p25_1m", "Waiting, 1m p25", "count", "kvdoctor:waiting:p25_1m", short="waiting p25 1m"),
    Signal("waiting_deferred", "Waiting (deferred), 30s peak", "count", "kvdoctor:waiting_deferred", short="deferred"),
    Signal("engines", "Data-parallel engines", "count", short="engines"),  # counted by the diagnosis, 2 or more
    Signal("imbalance_pressed_running", "Running on the queuing engine", "count",
           "kvdoctor:engine_imbalance:pressed_running", short="queuing engine running"),
    # per engine (label `engine`); split off by kvdoctor.diagnosis.evidence as {engine: {key without engine_: value}}
    Signal("engine_running_avg_1m", "Engine running, 1m avg", "count", "kvdoctor:engine_running:avg1m", per_engine=True),
    Signal("engine_running_max_1m", "Engine running, 1m peak", "count", "kvdoctor:engine_running:max1m", per_engine=True),
    Signal("engine_waiting_avg_1m", "Engine waiting, 1m avg", "count", "kvdoctor:engine_waiting:avg1m", per_engine=True),
    Signal("engine_waiting_max_1m", "Engine waiting, 1m peak", "count", "kvdoctor:engine_waiting:max1m", per_engine=True),
    Signal("engine_kv_usage_max_1m", "Engine KV usage, 1m peak", "pct", "kvdoctor:engine_kv_usage:max1m",
           per_engine=True),
    Signal("engine_preemptions_per_s", "Engine preemptions", "rate", "kvdoctor:engine_preemptions:rate_held",
           per_engine=True),
    Signal("engine_kv_bound", "Engine out of KV cache", "pct", "kvdoctor:engine_kv_bound:max30s", per_engine=True),
    Signal("engine_batch_cap_plateau", "Engine batch cap", "count", "kvdoctor:engine_batch_cap:plateau",
           per_engine=True),
    Signal("engine_pressed", "Engine queuing", "count", "kvdoctor:engine_pressed:running_avg1m", per_engine=True),
    Signal("engine_room", "Engine with room", "count", "kvdoctor:engine_room:running_avg1m", per_engine=True),
    Signal("engine_requests_min_30s", "Engine requests, 30s minimum", "count", "kvdoctor:engine_requests:min30s",
           per_engine=True),
    Signal("engine_tokens_moved_30s", "Engine tokens in 30s", "tokens", "kvdoctor:engine_tokens:moved30s",
           per_engine=True),
    Signal("engine_gauge_changes_30s", "Engine gauge changes in 30s", "count", "kvdoctor:engine_gauges:changes30s",
           per_engine=True),
    Signal("engine_stalled_requests", "Engine stalled requests", "count", "kvdoctor:engine_stalled:requests",
           per_engine=True),
    Signal("max_model_len", "max_model_len", "tokens", short="--max-model-len"),
    Signal("request_p99_tokens", "Request length p99", "tokens", short="request p99"),
    Signal("requests_observed", "Requests observed", "count", short="requests seen"),
    # the what-if follow-up (kvdoctor/whatif/followup.py): |predicted − measured| / measured after a restart
    Signal("prediction_error_ttft_p50_s", "TTFT p50 prediction error", "pct", short="TTFT p50 error"),
    Signal("prediction_error_itl_p50_s", "ITL p50 prediction error", "pct", short="ITL p50 error"),
    Signal("prediction_error_generation_tokens_per_s", "Throughput prediction error", "pct",
           short="throughput error"),
    Signal("prediction_error_ttft_p95_s", "TTFT p95 prediction error", "pct", short="TTFT p95 error"),
    Signal("prediction_inside_share", "Measured inside the 80 % interval", "pct", short="inside interval"),
    # annotations kvdoctor writes into the evidence beside the measurements (which engine, which rule, what changed,
    # the SLO headroom's own figures); labels as they read before they were registered, in name order
    Signal("batch_cap_per_engine", "Batch cap per engine", "plain"),
    Signal("change", "Change", "plain"),
    Signal("co_binding", "Co binding", "plain"),
    Signal("engine", "Engine", "plain"),
    Signal("limit_checked", "Limit checked", "plain"),
    Signal("limit_rule", "Limit rule", "plain"),
    Signal("replicas_needed", "Replicas needed", "plain"),
    Signal("slo_headroom_timestamp", "Slo headroom timestamp", "plain"),
)  # fmt: skip

# A data table too: one FindingKind an entry, its prose as written (fmt: skip).
FINDINGS: dict[str, FindingKind] = {
    f.name: f
    for f in (
        FindingKind("kv_cache", ("kv_usage_max_30s", "kv_usage_max_1m", "waiting_avg_1m", "preemptions_per_s",
                                 "running_avg_1m", "ttft_p95_s", "queue_time_p95_s"), "KV cache full"),
        FindingKind("batch_cap", ("running_max_1m", "batch_cap_configured", "batch_cap_inferred", "waiting_avg_1m",
                                  "kv_usage_max_1m", "preemptions_per_s", "ttft_p95_s", "queue_time_p95_s"),
                    "Batch cap hit"),
        FindingKind("compute", ("itl_p50_s", "itl_p95_s", "itl_baseline_s", "itl_batch_baseline_s", "compute_utilisation",
                                "itl_compute_threshold_s", "slo_itl_p95_s",
                                "ttft_p95_s", "slo_ttft_p95_s", "running_avg_1m", "waiting_avg_1m", "kv_usage_max_1m",
                                "generation_tokens_per_s", "prefill_decode_ratio", "itl_mean_30s", "itl_mean_baseline_s"),
                    "Compute bound"),
        FindingKind("engine_imbalance", ("imbalance_pressed_running", "waiting_avg_1m", "running_avg_1m"),
                    "Engines unevenly loaded"),
        FindingKind("stalled", ("running", "waiting", "waiting_deferred", "kv_usage", "prompt_tokens_p99"),
                    "Engine stalled"),
        FindingKind("preemption_storm", ("preemptions_per_s", "requests_per_s", "kv_usage_max_1m")),
        FindingKind("prefix_cache_low_hit_rate", ("prefix_cache_hit_ratio_30s", "prefix_cache_hit_ratio", "prompt_tokens_p50")),
        FindingKind("spec_decode_low_acceptance", ("spec_decode_acceptance",)),
        FindingKind("spec_decode_high_load", ("running_avg_1m", "itl_p50_s", "itl_baseline_s")),
        FindingKind("lora_adapter_slots", ("waiting_deferred", "running_avg_1m", "kv_usage_max_1m")),
        FindingKind("target_down", severity="critical", meaning=(
            "kvdoctor's own scrape of the target failed (connection refused, timeout, an error status or a body "
            "that is not Prometheus text); the target's verdict is `unknown` until it answers again."),
            advice="Check the vLLM process and its /metrics endpoint; an OOM at start-up often means "
                   "--gpu-memory-utilization or --max-model-len is too high"),
        FindingKind("metrics_missing", severity="warning", meaning=(
            "The target answers but its last scrape lacks families a diagnosis needs (KV usage, running and "
            "waiting requests, preemptions, the TTFT and inter-token latency histograms), so some limits cannot "
            "be told apart."),
            advice="Scrape vLLM's own /metrics (not a proxy or a Ray-prefixed export); "
                   "check --disable-log-stats is off and the version is ≥ 0.8"),
        FindingKind("prediction_check", ("prediction_error_ttft_p50_s", "prediction_error_itl_p50_s",
                                         "prediction_error_generation_tokens_per_s", "prediction_error_ttft_p95_s",
                                         "prediction_inside_share"),
                    "Prediction check", severity="info", meaning=(
            "The engine restarted with another configuration (a new num_gpu_blocks in vllm:cache_config_info, or "
            "a new batch-cap plateau) under a comparable load: kvdoctor's what-if prediction for that change, made "
            "from the metrics before the restart, set against what the target measured since (error ratios, also "
            "as kvdoctor_prediction_error_ratio), and whether each measured value fell inside the prediction's "
            "80 % interval (p10-p90)."),
            advice="Nothing to change: it tells how far to trust the predicted effects next to the advice on this "
                   "server. Errors well above 0.3 mean the step-time model or the workload inference missed "
                   "something here; `kvdoctor whatif` prints the assumptions it made."),
        FindingKind("relief_check", (), "Relief check", severity="info",
                    meaning=(
            "More than one limit could be named, and the what-if simulation of each relief (the batch cap ×2, the "
            "KV cache ×2, a second replica) says another limit is what to relieve. A relief helps when it raises "
            "throughput (tokens/s, completed requests/s) by 5 % or more; while the server is saturated (clients "
            "wait for answers, or arrivals outpace completions) nothing else counts, since at the same throughput "
            "a shorter TTFT is paid in ITL and past capacity the queue grows either way (unless the relief ends the "
            "overload), and throughput bought with a batch the server runs at 70 % of its compute ceiling or more "
            "(what the relief's ITL cost implies) is slower tokens, not capacity; below capacity a relief "
            "also helps when it cuts the quantity that suffers (TTFT p95 while requests queue, else ITL p50) by "
            "10 % without lengthening the other by 10 %. The cap and the cache are asked first; compute is named "
            "when only the replica helps. The rule's limit is then co-binding: the diagnosis names the limit whose "
            "relief helps (its verdict, `limit_checked`) and keeps the rule's (`limit_rule`, `co_binding`); the "
            "pack's `bottleneck` label and its alert stay the rule's."),
            advice="Make the change this finding leads with first (its predicted effect is beside it); the rule's "
                   "own advice follows it in the list."),
        FindingKind("max_model_len_oversized", ("max_model_len", "request_p99_tokens", "requests_observed"),
                    severity="info", meaning=(
            "`--max-model-len` (from vllm:cache_config_info, or bounded by the token histograms' buckets) is at "
            "least four times the p99 request length (prompt + generation) over at least 20 finished requests."),
            advice="The finding names a `--max-model-len` that still fits the observed p99 request. vLLM V1 "
                   "allocates KV blocks as requests grow, so a shorter limit frees cache only where long requests "
                   "actually hold it; it also lets the engine start on smaller memory."),
    )
}  # fmt: skip


def recorded(per_instance: bool | None = None, per_engine: bool | None = None) -> dict[str, str]:
    """Evidence key -> recording rule, for the signals the pack records (per instance, model or engine, or all)."""
    return {
        s.key: s.rule
        for s in SIGNALS.values()
        if s.rule
        and (per_instance is None or s.per_instance == per_instance)
        and (per_engine is None or s.per_engine == per_engine)
    }


def evidence_for(finding: str) -> tuple[str, ...]:
    """The evidence keys that decide a finding, in display order (none for an unknown finding)."""
    kind = FINDINGS.get(finding)
    return kind.evidence if kind else ()
