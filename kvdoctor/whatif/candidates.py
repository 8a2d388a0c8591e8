"""What the plan search tries and answers: a candidate configuration and the plan, in their `--json` shapes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvdoctor.jsondoc import JsonObject
from kvdoctor.whatif.saturation import Overload, as_dict
from kvdoctor.whatif.window import Quantities

Changes = dict[str, float | str]


@dataclass(frozen=True, eq=False)
class Predicted:
    """What one candidate predicts: the simulation's quantities, its overload if any, the SLOs' other quantiles."""

    quantities: Quantities
    overload: Overload | None
    extra: tuple[tuple[str, float | None], ...] = ()  # SLO quantiles Quantities does not carry, rounded

    def to_json(self) -> JsonObject:
        """`predicted` in plan's `--json`: whatif --json's quantity and saturation keys, then the extra quantiles."""
        return {**self.quantities.to_dict(), **as_dict(self.overload), **dict(self.extra)}

    def value(self, key: str) -> float | None:
        """A predicted number as `--json` shows it (4 significant digits); None when the simulation has none."""
        v = self.to_json().get(key)
        return v if isinstance(v, float) else None

    def __eq__(self, other: object) -> bool:
        # as their JSON: an unmeasured NaN there is null, which equals itself
        return isinstance(other, Predicted) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]


@dataclass
class Candidate:
    """One configuration tried: its flag changes, replicas, what it predicts, and what each SLO has left."""

    changes: Changes
    replicas: int
    predicted: Predicted
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
            "predicted": self.predicted.to_json(),
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
    # the headroom's 80 % interval under the step model's posterior (the point itself where it has none)
    headroom_p10: dict[str, float] = field(default_factory=dict)
    headroom_p90: dict[str, float] = field(default_factory=dict)
    # the nearest cheaper candidate as the step model's cheap end predicts it, where it holds there (canary.py)
    might_hold: Candidate | None = None

    def to_dict(self) -> JsonObject:
        """The `--json` shape the issue names."""
        return {
            "slos": dict(self.slos),
            "load": rounded(self.load),
            "current": {
                "headroom": {k: rounded(v) for k, v in self.headroom.items()},
                "headroom_p10": {k: rounded(v) for k, v in self.headroom_p10.items()},
                "headroom_p90": {k: rounded(v) for k, v in self.headroom_p90.items()},
                "predicted": self.current.predicted.to_json(),
                "replicas": self.current.replicas,
                "requests_per_s": rounded(self.requests_per_s),
            },
            "chosen": self.chosen.to_dict(),
            "candidates": [c.to_dict() for c in self.candidates],
            "simulations": self.simulations,
            "feasible": self.feasible,
            "might_hold": self.might_hold.to_dict() if self.might_hold else None,
            "notes": list(self.notes),
        }


def rounded(v: float | None) -> float | None:
    """v to 4 significant digits for `--json`; None for a missing or non-finite one."""
    return float(f"{v:.4g}") if v is not None and math.isfinite(v) else None
