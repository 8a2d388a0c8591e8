"""A target as kvdoctor knows it: what the operator said about it, and what the last look showed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvdoctor.capacity.budget import CapacityEstimate
from kvdoctor.capacity.live import LiveCapacity


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

    @property
    def url(self) -> str:
        """Where it is scraped, without credentials."""
        return self.facts.url

    @property
    def labels(self) -> dict[str, str]:
        """The labels the operator (or Prometheus' job) gave it."""
        return self.facts.labels

    def record(
        self, t: float, up: bool, error: str = "", duration_s: float | None = None,
        samples: int | None = None, limit: str | None = None,
    ) -> None:  # fmt: skip
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

    def to_dict(self) -> dict[str, Any]:
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
        }
