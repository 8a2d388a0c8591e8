"""The report document as values: what `--format json` prints is `Report.to_json()`, key for key.

A field's JSON key is its name unless its metadata says otherwise: `json` renames it (`class` is a keyword),
`flatten` merges a part's keys into its parent (a target's row is its summary, sizing and costs side by side),
`omit_none` leaves the key out while the value is None (a section that only some reports have).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import TypeVar, Union, cast

from kvdoctor.report.rows import Costs, FleetSizing, Sizing, Summary, Traffic

Json = Union[dict[str, "Json"], list["Json"], str, int, float, bool, None]  # noqa: UP007 (a recursive alias)
Number = float | int | str | None  # a figure a recommendation or plan names (a target by its name)
T = TypeVar("T")

FLATTEN = {"flatten": True}
OMIT_NONE = {"omit_none": True}


def to_json(value: object) -> Json:
    """A report value (dataclasses, tuples, dicts, numbers, strings) as JSON-ready data, in field order."""
    if is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Json] = {}
        for f in fields(value):
            v = getattr(value, f.name)
            if f.metadata.get("omit_none") and v is None:
                continue
            if f.metadata.get("flatten"):
                out.update(cast(dict[str, Json], to_json(v)))
            else:
                out[f.metadata.get("json", f.name)] = to_json(v)
        return out
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    return cast(Json, value)


def scrubbed(value: T) -> T:
    """A copy of value with every NaN or ±Inf replaced by None (no JSON holds one; a table shows a dash)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else cast(T, None)
    if is_dataclass(value) and not isinstance(value, type):
        return cast(T, replace(value, **{f.name: scrubbed(getattr(value, f.name)) for f in fields(value)}))
    if isinstance(value, tuple):
        return cast(T, tuple(scrubbed(v) for v in value))
    if isinstance(value, list):
        return cast(T, [scrubbed(v) for v in value])
    if isinstance(value, dict):
        return cast(T, {k: scrubbed(v) for k, v in value.items()})
    return value


@dataclass(frozen=True)
class IncidentSpan:
    """A run of a limit class or of a down target, with the finding that explained it."""

    target: str
    model_name: str
    cls: str = field(metadata={"json": "class"})
    start: float
    end: float
    start_iso: str
    end_iso: str
    minutes: float
    finding: str
    explanation: str


@dataclass(frozen=True)
class TargetFigures:
    """One (target, model)'s row: its summary, sizing and costs side by side, its incidents and traffic."""

    target: str
    model_name: str
    summary: Summary = field(metadata=FLATTEN)
    sizing: Sizing = field(metadata=FLATTEN)
    costs: Costs = field(metadata=FLATTEN)
    incidents: tuple[IncidentSpan, ...]
    traffic: Traffic


@dataclass(frozen=True)
class FleetFigures:
    """The fleet's row: how many targets and replicas, and the same figures over all of them."""

    targets: int
    replicas: int
    summary: Summary = field(metadata=FLATTEN)
    sizing: FleetSizing = field(metadata=FLATTEN)
    costs: Costs = field(metadata=FLATTEN)
    traffic: Traffic


@dataclass(frozen=True)
class TimeRange:
    """The span the report covers: first to last observation, and the first and last UTC hour."""

    start: float
    end: float
    start_iso: str
    end_iso: str
    hours: float
    first_hour: int
    last_hour: int


@dataclass(frozen=True)
class PriceEcho:
    """The prices the report was computed with."""

    gpu_hour_usd: float | None
    gpus_per_target: int
    api_price_in_usd_per_1m: float | None
    api_price_out_usd_per_1m: float | None


@dataclass(frozen=True)
class ModelCapacity:
    """Generation tokens/s one replica of a model sustains, and how that was measured."""

    generation_tokens_per_s_per_replica: float | None
    basis: str


@dataclass(frozen=True)
class HourRow:
    """The fleet's figures of one UTC hour."""

    start: int
    start_iso: str
    requests: int
    prompt_tokens: int
    generation_tokens: int
    generation_tokens_per_s: float
    replicas_needed: int | None
    hours: dict[str, float]  # per class
    covered_s: float


@dataclass(frozen=True)
class Timeline:
    """One (target, model)'s class segments: (start, end, class)."""

    target: str
    model_name: str
    segments: tuple[tuple[float, float, str], ...]


@dataclass(frozen=True)
class Recommendation:
    """One recommendation with its numbers and the evidence it rests on."""

    kind: str
    text: str
    numbers: dict[str, Number]
    evidence: str


@dataclass(frozen=True)
class PlannedHour:
    """How many replicas of the plan's flags held the SLOs in one hour of what a target served."""

    start: int
    load: float  # the hour's request rate over the planned stretch's
    replicas: int | None  # None: no count held them
    hours: float  # watched in that hour


@dataclass(frozen=True)
class PlannedTarget:
    """What one target paid beside what the plan's configuration would have; `why` when there is no plan."""

    target: str
    model_name: str
    paid_gpu_hours: float
    paid_cost_usd: float | None
    changes: dict[str, Number] | None = field(default=None, metadata=OMIT_NONE)
    feasible: bool = False
    replica_hours: float | None = None
    gpu_hours: float | None = None
    cost_usd: float | None = None
    hourly: tuple[PlannedHour, ...] | None = field(default=None, metadata=OMIT_NONE)
    simulations: int | None = field(default=None, metadata=OMIT_NONE)
    why: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Planned:
    """The plan's cost per target and in all, next to what was paid (with --slo)."""

    slos: dict[str, float]
    targets: tuple[PlannedTarget, ...]
    gpu_hours: float | None
    cost_usd: float | None
    paid_gpu_hours: float | None
    paid_cost_usd: float | None


@dataclass(frozen=True)
class Report:
    """Everything the report says; its renderings (Markdown, HTML) and its JSON are made from this."""

    version: int = field(metadata={"json": "kvdoctor_report"})
    source: str
    generated: str
    range: TimeRange
    prices: PriceEcho
    headroom: float
    capacity: dict[str, ModelCapacity]
    targets: tuple[TargetFigures, ...]
    fleet: FleetFigures
    hourly: tuple[HourRow, ...]
    timeline: tuple[Timeline, ...]
    incidents: tuple[IncidentSpan, ...]
    recommendations: tuple[Recommendation, ...] = ()
    notes: tuple[str, ...] = ()
    planned: Planned | None = field(default=None, metadata=OMIT_NONE)

    def to_json(self) -> dict[str, Json]:
        """The JSON document `--format json` prints and the page embeds."""
        return cast(dict[str, Json], to_json(self))
