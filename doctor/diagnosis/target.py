"""A target as the classifier sees it: what the operator said about it, and what the last look showed."""

from __future__ import annotations

from dataclasses import dataclass, field

from doctor.capacity.budget import CapacityEstimate
from doctor.capacity.live import LiveCapacity


@dataclass(frozen=True)
class TargetFacts:
    """What the operator told kvdoctor about a server (config entry, presets), prepared for the pipeline."""

    max_num_seqs: int | None = None
    slo_itl_p95_s: float | None = None
    slo_ttft_p95_s: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    estimate: CapacityEstimate | None = None  # from the model and GPU presets, when given
    gpu_fp8: bool | None = None


@dataclass
class Target:
    """One target of a pipeline: its facts, and whether its last scrape (or Prometheus) answered."""

    name: str
    facts: TargetFacts = field(default_factory=TargetFacts)
    up: bool | None = None  # None: never scraped yet
    error: str = ""
    missing: list[str] = field(default_factory=list)  # expected vLLM families absent from the last scrape
    live: LiveCapacity | None = None
