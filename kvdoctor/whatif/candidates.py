"""What the plan search tries and answers: a candidate configuration and the plan, in their `--json` shapes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.jsondoc import JsonObject

Changes = dict[str, float | str]


@dataclass
class Candidate:
    """One configuration tried: its flag changes, replicas, what it predicts, and what each SLO has left."""

    changes: Changes
    replicas: int
    predicted: dict[str, Any]
    margins: dict[str, float | None]
    meets: bool
    cost_per_hour_usd: float | None = None
    cost_per_1m_generation_tokens_usd: float | None = None

    def worst(self) -> float:
        """The tightest margin (−inf when an SLO has no value)."""
        return min((m if m is not None else -math.inf for m in self.margins.values()), default=math.inf)

    def to_dict(self) -> JsonObject:
        """The `--json` shape of a candidate."""
        return {
            "changes": dict(self.changes),
            "replicas": self.replicas,
            "predicted": self.predicted,
            "margins": {k: rounded(v) for k, v in self.margins.items()},
            "meets_slos": self.meets,
            "cost_per_hour_usd": rounded(self.cost_per_hour_usd),
            "cost_per_1m_generation_tokens_usd": rounded(self.cost_per_1m_generation_tokens_usd),
        }


@dataclass
class Plan:
    """The answer: SLOs, load, today's headroom and prediction, the pick, every candidate, the simulation count."""

    slos: dict[str, float]
    load: float
    current: Candidate
    headroom: dict[str, float]
    chosen: Candidate
    candidates: list[Candidate]
    simulations: int
    feasible: bool
    notes: list[str] = field(default_factory=list)
    # the window's traffic, what load ×1 means: headroom × it is the rate at which an SLO breaks
    requests_per_s: float = math.nan

    def to_dict(self) -> JsonObject:
        """The `--json` shape the issue names."""
        return {
            "slos": dict(self.slos),
            "load": rounded(self.load),
            "current": {
                "headroom": {k: rounded(v) for k, v in self.headroom.items()},
                "predicted": self.current.predicted,
                "replicas": self.current.replicas,
                "requests_per_s": rounded(self.requests_per_s),
            },
            "chosen": self.chosen.to_dict(),
            "candidates": [c.to_dict() for c in self.candidates],
            "simulations": self.simulations,
            "feasible": self.feasible,
            "notes": list(self.notes),
        }


def rounded(v: float | None) -> float | None:
    """v to 4 significant digits for `--json`; None for a missing or non-finite one."""
    return float(f"{v:.4g}") if v is not None and math.isfinite(v) else None
