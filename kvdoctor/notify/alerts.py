"""What the lifecycle tracks and owes: a finding being followed, an open incident, a notification event."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Self

from kvdoctor import fmt
from kvdoctor.jsondoc import JsonObject
from kvdoctor.verdicts import Diagnosis, Finding

Evidence = dict[str, float | int | str | None]  # JSON-ready: NaN is None


@dataclass(frozen=True)
class AdviceView:
    """One piece of advice as an alert shows it: the flag, what to do, where the numbers come from, the effect."""

    flag: str = ""
    text: str = ""
    source: str = ""
    predicted: str = ""


@dataclass(frozen=True)
class Shown:
    """What an alert shows of a finding and its diagnosis as last seen: text, evidence (NaN as null), runbook,
    advice. The lifecycle compares two of them to decide whether a change is worth a thread reply."""

    summary: str = ""
    description: str = ""
    evidence: Evidence = field(default_factory=dict)
    runbook: str = ""
    bottleneck: str = ""
    since: float | None = None
    advice: tuple[AdviceView, ...] = ()

    @classmethod
    def from_dict(cls, d: JsonObject) -> Self:
        """Read back from JSON (the state file, an outbox row): unknown keys left out, missing ones defaulted."""
        known = {f.name for f in fields(cls)} - {"advice"}
        return cls(**{k: v for k, v in d.items() if k in known}, advice=_advice(d))


@dataclass(frozen=True)
class AlertView(Shown):
    """What renderers and sinks need of one alert: what it shows, and where its lifecycle stands; asdict() is its
    JSON, from_dict() reads that back."""

    target: str = ""
    model_name: str = ""
    finding: str = ""
    severity: str = "info"
    status: str = "pending"  # pending | firing | resolved
    started: float | None = None
    last_seen: float | None = None
    fired_at: float | None = None
    resolved_at: float | None = None
    fired_evidence: Evidence = field(default_factory=dict)  # the evidence when it started firing


def _advice(d: JsonObject) -> tuple[AdviceView, ...]:
    said = {f.name for f in fields(AdviceView)}
    return tuple(
        AdviceView(**{k: str(v or "") for k, v in a.items() if k in said}) for a in d.get("advice") or ()
    )


@dataclass
class TrackedFinding:
    """One (target, model_name, finding) being tracked."""

    target: str
    model_name: str
    finding: str
    severity: str
    started: float
    last_seen: float
    status: str = "pending"  # pending | firing | resolved
    fired_at: float | None = None
    resolved_at: float | None = None
    announced: bool = False
    silenced: bool = False
    snapshot: Shown = field(default_factory=Shown)
    notified: Shown | None = None  # what the last notification showed, and at which severity
    notified_severity: str | None = None
    fired_evidence: Evidence = field(default_factory=dict)  # evidence when it started firing

    @property
    def key(self) -> str:
        """Incident key of this alert."""
        return f"{self.target}|{self.model_name}|{self.finding}"

    def labels(self) -> dict[str, str]:
        """Labels for silences, routes and grouping."""
        return {
            "target": self.target,
            "model_name": self.model_name,
            "finding": self.finding,
            "severity": self.severity,
            "bottleneck": self.snapshot.bottleneck,
        }

    def view(self) -> AlertView:
        """What renderers and sinks need of it."""
        return AlertView(
            **vars(self.snapshot),
            target=self.target,
            model_name=self.model_name,
            finding=self.finding,
            severity=self.severity,
            status=self.status,
            started=self.started,
            last_seen=self.last_seen,
            fired_at=self.fired_at,
            resolved_at=self.resolved_at,
            fired_evidence=self.fired_evidence,
        )

    def to_state(self) -> JsonObject:
        """JSON for the state file, in the layout earlier kvdoctors wrote (`notified` holds its severity)."""
        d = asdict(self)
        severity = d.pop("notified_severity")
        d["notified"] = {**d["notified"], "severity": severity} if self.notified is not None else {}
        return d

    @classmethod
    def from_state(cls, d: JsonObject) -> TrackedFinding:
        """Inverse of to_state."""
        notified = d.get("notified") or {}
        return cls(
            **{
                **d,
                "snapshot": Shown.from_dict(d.get("snapshot") or {}),
                "notified": Shown.from_dict(notified) if notified else None,
                "notified_severity": notified.get("severity"),
                "fired_evidence": dict(d.get("fired_evidence") or {}),
            }
        )


@dataclass
class Incident:
    """An open incident: one Slack thread for all announced alerts of a group (per target by default)."""

    key: str
    labels: dict[str, str]
    incident: str
    opened: float
    channel: str
    seq: int = 0
    last_notified: float = 0.0


@dataclass
class Event:
    """A notification owed: firing, update, repeat or resolved for one incident (group)."""

    kind: str
    incident: str
    group: str
    group_labels: dict[str, str]
    seq: int
    t: float
    opened: float
    channel: str
    alerts: list[AlertView]
    changes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """Idempotency key: incident plus event sequence."""
        return f"{self.incident}#{self.seq}"

    def to_dict(self) -> JsonObject:
        """JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: JsonObject) -> Event:
        """Inverse of to_dict (an outbox row written by an older kvdoctor reads too)."""
        return cls(**{**d, "alerts": [AlertView.from_dict(a) for a in d.get("alerts", [])]})


def snapshot_of(f: Finding, d: Diagnosis) -> Shown:
    """What an alert shows of a finding and its diagnosis: text, evidence (NaN as null), runbook, advice."""
    evidence = {**d.evidence, **f.evidence} if f.bottleneck else dict(f.evidence)
    clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in evidence.items()}
    return Shown(
        summary=f.summary,
        description=f.description,
        evidence=clean,
        runbook=f.runbook,
        bottleneck=f.bottleneck,
        since=f.since,
        advice=tuple(
            AdviceView(flag=a.flag, text=a.text, source=a.source, predicted=a.effect.text if a.effect else "")
            for a in f.advice
        ),
    )


def material_changes(old: Shown, new: Shown) -> list[str]:
    """Human descriptions of changes worth a thread reply (not every wobble of the numbers)."""
    out = []
    oe, ne = old.evidence, new.evidence
    for k in sorted(set(oe) & set(ne)):
        a, b = oe[k], ne[k]
        if not isinstance(a, int | float) or not isinstance(b, int | float):
            continue
        if fmt.is_fraction_key(k):
            big = abs(b - a) >= 0.10
        else:
            big = abs(b - a) >= 0.5 * max(abs(a), abs(b)) and abs(b - a) > 1e-9
        if big:
            out.append(f"{fmt.label_of(k)} {fmt.value(k, a)} → {fmt.value(k, b)}")
    if {a.flag for a in old.advice} != {a.flag for a in new.advice}:
        out.append("advice changed")
    return out
