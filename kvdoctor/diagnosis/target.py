"""A target as kvdoctor knows it: what the operator said about it, and what the last look showed."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvdoctor.capacity.budget import CapacityEstimate
from kvdoctor.capacity.live import LiveCapacity
from kvdoctor.jsondoc import JsonObject


@dataclass(frozen=True)
class TargetFacts:
    """What the operator told kvdoctor about a server (config entry, presets), prepared for the pipeline."""

    max_num_seqs: int | None = None
    slo_itl_p95_s: float | None = None
    slo_ttft_p95_s: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    estimate: CapacityEstimate | None = None  # from the model and GPU presets, when given
    gpu_fp8: bool | None = None
    url: str = ""  # without credentials


@dataclass
class Target:
    """One target: its facts, whether its last scrape (or Prometheus) answered, and what that look showed."""

    name: str
    facts: TargetFacts = field(default_factory=TargetFacts)
    up: bool | None = None  # None: never scraped yet
    last_error: str = ""  # why the last look failed
    errors_total: int = 0
    last_success_ts: float | None = None
    last_scrape_duration_s: float | None = None
    samples: int | None = None  # in the last scrape (0 when it failed or was refused)
    limit_exceeded_total: dict[str, int] = field(default_factory=dict)  # limit name -> scrapes refused for it
    missing: list[str] = field(default_factory=list)  # expected vLLM families absent from the last scrape
    live: LiveCapacity | None = None
    # values refused as impossible (NaN, +Inf, negative): what is wrong now per source ("scrape", "evidence")
    # and metric, and how many were refused per metric since start
    invalid: dict[str, dict[str, str]] = field(default_factory=dict)
    invalid_values_total: dict[str, int] = field(default_factory=dict)
    step_errors: dict[str, str] = field(
        default_factory=dict
    )  # per-target step (classify, …) -> why it failed
    step_failures_total: dict[str, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """Where it is scraped, without credentials."""
        return self.facts.url

    @property
    def labels(self) -> dict[str, str]:
        """The labels the operator (or Prometheus' job) gave it."""
        return self.facts.labels

    def record(
        self,
        t: float,
        up: bool,
        error: str = "",
        duration_s: float | None = None,
        samples: int | None = None,
        limit: str | None = None,
    ) -> None:
        """Count one look at the target at t: a success, or a failure and why (limit: the one it went over)."""
        self.up, self.last_error = up, "" if up else (error or "scrape failed")
        if up:
            self.last_success_ts = t
        else:
            self.errors_total += 1
        if duration_s is not None:
            self.last_scrape_duration_s = duration_s
        if samples is not None:
            self.samples = samples
        if limit is not None:
            self.limit_exceeded_total = {
                **self.limit_exceeded_total,
                limit: self.limit_exceeded_total.get(limit, 0) + 1,
            }

    def note_invalid(self, source: str, found: dict[str, str]) -> None:
        """Record the impossible values one look (source: "scrape" or "evidence") refused, metric -> problem."""
        if not found and not self.invalid.get(source):
            return  # the common case, every cycle for every target: nothing to replace
        # whole values replaced, never mutated: DaemonState publishes shallow copies
        self.invalid = {**self.invalid, source: dict(found)}
        if found:
            totals = dict(self.invalid_values_total)
            for metric in found:
                totals[metric] = totals.get(metric, 0) + 1
            self.invalid_values_total = totals

    def invalid_notes(self) -> list[str]:
        """What is refused now, as the page shows it: "`vllm:kv_cache_usage_perc` = +Inf ignored"."""
        return [
            f"`{m}` = {p} ignored"
            for _, found in sorted(self.invalid.items())
            for m, p in sorted(found.items())
        ]

    def note_step(self, step: str, error: str | None) -> None:
        """Record whether one per-target step (classify, advise, history, whatif) failed this cycle, and why."""
        if error is None and step not in self.step_errors:
            return
        errors = {k: v for k, v in self.step_errors.items() if k != step}
        if error is not None:
            errors[step] = error
            self.step_failures_total = {
                **self.step_failures_total,
                step: self.step_failures_total.get(step, 0) + 1,
            }
        self.step_errors = errors

    def to_dict(self) -> JsonObject:
        """Its scrape health as /api/v1/targets shows it, JSON-ready."""
        return {
            "name": self.name,
            "url": self.url,
            "up": self.up,
            "last_scrape_duration_s": self.last_scrape_duration_s,
            "last_success_ts": self.last_success_ts,
            "last_error": self.last_error,
            "errors_total": self.errors_total,
            "samples": self.samples,
            "limit_exceeded_total": dict(self.limit_exceeded_total),
            "labels": dict(self.labels),
            "invalid_values": self.invalid_notes(),
            "invalid_values_total": dict(self.invalid_values_total),
            "step_errors": dict(self.step_errors),
            "step_failures_total": dict(self.step_failures_total),
        }
