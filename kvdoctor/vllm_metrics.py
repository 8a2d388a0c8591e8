"""The vLLM metric families kvdoctor reads, each with the names older vLLM releases gave it: the one table.

vLLM's V1 metrics are defined in `vllm/v1/metrics/loggers.py` (`PrometheusStatLogger`). A renamed family lists
its current name first and the old ones after it; a server exposing both (0.10.x kept the deprecated names)
must be counted once, so readers take the first name present (the what-if's `Snap.get`) and the rule pack
merges them with `or`, newest first. `tests/test_vllm_metrics.py` holds this table against the pack.
"""

from __future__ import annotations

from dataclasses import dataclass

_HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Family:
    """One vLLM metric family: kvdoctor's key for it, its names newest first, and what it is."""

    key: str
    names: tuple[str, ...]
    kind: str  # "gauge", "counter", "histogram" or "info", as vLLM declares it
    needed_for: str = ""  # the inventory's label when a diagnosis needs the family ("" when it does not)

    @property
    def name(self) -> str:
        """The current name."""
        return self.names[0]

    @property
    def inventory_names(self) -> tuple[str, ...]:
        """The sample names that show a scrape carries the family (a histogram's buckets)."""
        return tuple(n + "_bucket" for n in self.names) if self.kind == "histogram" else self.names


# Renames seen in the recordings: 0.8.5 has only the old names, 0.10.2 both, 0.16 and later only the new ones.
FAMILIES: tuple[Family, ...] = (
    Family("kv", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "gauge", "KV usage"),
    Family("running", ("vllm:num_requests_running",), "gauge", "running requests"),
    Family("waiting", ("vllm:num_requests_waiting",), "gauge", "waiting requests"),
    Family("waiting_by_reason", ("vllm:num_requests_waiting_by_reason",), "gauge"),
    Family("preemptions", ("vllm:num_preemptions_total",), "counter", "preemptions"),
    Family("ttft", ("vllm:time_to_first_token_seconds",), "histogram", "TTFT histogram"),
    Family(
        "itl",
        ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        "histogram",
        "inter-token latency histogram",
    ),
    Family("queue_time", ("vllm:request_queue_time_seconds",), "histogram"),
    Family("prefill_time", ("vllm:request_prefill_time_seconds",), "histogram"),
    Family("e2e_latency", ("vllm:e2e_request_latency_seconds",), "histogram"),
    Family("prompt_tokens", ("vllm:request_prompt_tokens",), "histogram"),
    Family("generation_tokens", ("vllm:request_generation_tokens",), "histogram"),
    Family("max_tokens", ("vllm:request_params_max_tokens",), "histogram"),
    Family("max_generation_tokens", ("vllm:request_max_num_generation_tokens",), "histogram"),
    Family("prefill_kv_computed", ("vllm:request_prefill_kv_computed_tokens",), "histogram"),
    Family("iteration_tokens", ("vllm:iteration_tokens_total",), "histogram"),
    Family("prompt_tokens_total", ("vllm:prompt_tokens_total",), "counter"),
    Family("prompt_tokens_by_source", ("vllm:prompt_tokens_by_source_total",), "counter"),
    Family("generation_tokens_total", ("vllm:generation_tokens_total",), "counter"),
    Family("request_success", ("vllm:request_success_total",), "counter"),
    Family("prefix_hits", ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"), "counter"),
    Family(
        "prefix_queries",
        ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        "counter",
    ),
    Family("spec_draft_tokens", ("vllm:spec_decode_num_draft_tokens_total",), "counter"),
    Family("spec_accepted_tokens", ("vllm:spec_decode_num_accepted_tokens_total",), "counter"),
    Family("spec_accepted_per_pos", ("vllm:spec_decode_num_accepted_tokens_per_pos",), "counter"),
    Family("cache_config", ("vllm:cache_config_info",), "info"),
    Family("lora_requests", ("vllm:lora_requests_info",), "info"),
)

BY_KEY = {f.key: f for f in FAMILIES}
# key → names for every renamed family (what `Snap.get` resolves)
ALIASES = {f.key: f.names for f in FAMILIES if len(f.names) > 1}
HISTOGRAMS = tuple(n for f in FAMILIES if f.kind == "histogram" for n in f.names)
# what a diagnosis needs: inventory label → the sample names any of which shows the family is there
EXPECTED = {f.needed_for: f.inventory_names for f in FAMILIES if f.needed_for}


def family_of(sample_name: str) -> Family | None:
    """The family a sample name belongs to (a histogram's `_bucket`/`_sum`/`_count` included), or None."""
    for f in FAMILIES:
        for name in f.names:
            if sample_name == name or (
                f.kind == "histogram"
                and sample_name.startswith(name)
                and sample_name[len(name) :] in _HISTOGRAM_SERIES
            ):
                return f
    return None
