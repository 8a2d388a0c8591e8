"""Finding lifecycle: pending → firing (after `for`) → resolved (after hysteresis), grouped, deduplicated."""

from __future__ import annotations

from dataclasses import asdict

from kvdoctor import fmt
from kvdoctor.jsondoc import JsonObject
from kvdoctor.notify.alerts import (
    AlertView,
    Event,
    Incident,
    Shown,
    TrackedFinding,
    material_changes,
    snapshot_of,
)
from kvdoctor.notify.config import NotifyConfig
from kvdoctor.verdicts import Diagnosis, Finding

# While a target is down or its metrics are missing, its other findings can be neither confirmed nor
# refuted: they are held (not resolved) until the target answers again.
BLINDING = ("target_down", "metrics_missing")
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


class Lifecycle:
    """Pure notification state machine over diagnoses; time is passed in, state round-trips through JSON."""

    def __init__(self, config: NotifyConfig) -> None:
        self.config = config
        self.alerts: dict[str, TrackedFinding] = {}
        self.groups: dict[str, Incident] = {}
        self.recently_resolved: list[TrackedFinding] = []

    def _for(self, finding: str) -> float:
        return self.config.for_overrides.get(finding, self.config.for_)

    def _silenced(self, a: TrackedFinding, now: float) -> bool:
        return any(s.active(a.labels(), now) for s in self.config.silences)

    def _group_of(self, a: TrackedFinding) -> tuple[str, dict[str, str]]:
        labels = {k: a.labels()[k] for k in self.config.group_by}
        return ",".join(f"{k}={v}" for k, v in labels.items()) or "all", labels

    def _route(self, labels: dict[str, str]) -> str:
        for r in self.config.routes:
            if all(m.matches(labels) for m in r.matchers):
                return r.channel
        return self.config.slack.channel

    def _track(
        self, diagnoses: list[Diagnosis], now: float
    ) -> tuple[list[TrackedFinding], list[TrackedFinding]]:
        """Update alerts from this cycle's diagnoses; return (newly firing, resolved now)."""
        present: dict[str, tuple[Diagnosis, Finding]] = {}
        held = set()
        for d in diagnoses:
            if d.verdict == "unknown" or any(f.name in BLINDING for f in d.findings):
                held.add(d.target)
            for f in d.findings:
                present[f"{d.target}|{d.model_name}|{f.name}"] = (d, f)
        fired, resolved = [], []
        for key, (d, f) in present.items():
            a = self.alerts.get(key)
            if a is None:
                start = min(f.since, now) if f.since is not None else now
                a = self.alerts[key] = TrackedFinding(d.target, d.model_name, f.name, f.severity, start, now)
            a.last_seen, a.severity, a.snapshot = now, f.severity, snapshot_of(f, d)
            if a.status == "pending" and now - a.started >= self._for(f.name):
                a.status, a.fired_at = "firing", now
                a.fired_evidence = dict(a.snapshot.evidence)
                fired.append(a)
        for key, a in list(self.alerts.items()):
            if key in present:
                continue
            if a.status == "pending":
                del self.alerts[key]
            elif a.target in held and a.finding not in BLINDING:
                a.last_seen = now
            elif now - a.last_seen >= self.config.resolve_after:
                a.status, a.resolved_at = "resolved", now
                del self.alerts[key]
                resolved.append(a)
        for a in self.alerts.values():
            a.silenced = self._silenced(a, now)
        return fired, resolved

    def observe(self, diagnoses: list[Diagnosis], now: float) -> list[Event]:
        """Feed one evaluation cycle; return the notifications it makes owed."""
        _, resolved = self._track(diagnoses, now)
        horizon = now - self.config.alertmanager.resend_resolved_for
        self.recently_resolved = [a for a in self.recently_resolved if (a.resolved_at or 0) >= horizon]
        self.recently_resolved += [a for a in resolved if a.announced]
        by_group: dict[str, list[TrackedFinding]] = {}
        for a in [*self.alerts.values(), *resolved]:
            by_group.setdefault(self._group_of(a)[0], []).append(a)
        events = []
        for gkey, members in sorted(by_group.items()):
            ev = self._group_events(gkey, members, now)
            if ev:
                events.append(ev)
        return events

    def _group_events(self, gkey: str, members: list[TrackedFinding], now: float) -> Event | None:
        firing = [a for a in members if a.status == "firing"]
        new = [a for a in firing if not a.announced and not a.silenced]
        gone = [a for a in members if a.status == "resolved" and a.announced]
        g = self.groups.get(gkey)
        changes: list[str] = []
        if g is None:
            if not new:
                return None
            labels = self._group_of(new[0])[1]
            worst = min((a.severity for a in new), key=lambda s: SEVERITY_RANK.get(s, 9))
            g = Incident(gkey, labels, f"{gkey}@{now:.0f}", now, self._route({**labels, "severity": worst}))
            self.groups[gkey] = g
            kind = "firing"
        else:
            changes += [f"{a.finding} started" for a in new]
            changes += [f"{a.finding} resolved after {fmt.duration(now - (a.fired_at or now))}" for a in gone]
            due = now - g.last_notified >= self.config.update_interval
            for a in firing:
                if not a.announced or a.silenced:
                    continue
                if a.severity != a.notified_severity:
                    changes.append(f"{a.finding} severity {a.notified_severity} → {a.severity}")
                elif due:
                    changes += [
                        f"{a.finding}: {c}" for c in material_changes(a.notified or Shown(), a.snapshot)
                    ]
            still = [a for a in firing if a.announced or a in new]
            if not still:
                kind = "resolved"
            elif changes:
                kind = "update"
            elif now - g.last_notified >= self.config.repeat_interval and any(not a.silenced for a in still):
                kind = "repeat"
            else:
                return None
        for a in new:
            a.announced = True
        g.seq += 1
        g.last_notified = now
        shown = [a for a in members if a.announced]
        shown.sort(key=lambda a: (not a.snapshot.bottleneck, SEVERITY_RANK.get(a.severity, 9), a.key))
        for a in shown:
            a.notified, a.notified_severity = a.snapshot, a.severity
        if kind == "resolved":
            del self.groups[gkey]
        return Event(
            kind,
            g.incident,
            gkey,
            g.labels,
            g.seq,
            now,
            g.opened,
            g.channel,
            [a.view() for a in shown],
            changes,
        )

    def active_alerts(self) -> list[AlertView]:
        """Announced firing alerts and recently resolved ones (for Alertmanager)."""
        live = [a.view() for a in self.alerts.values() if a.status == "firing" and not a.silenced]
        return live + [a.view() for a in self.recently_resolved]

    def to_state(self) -> JsonObject:
        """JSON-ready state, so a restart neither forgets nor re-announces."""
        return {
            "version": 1,
            "alerts": [a.to_state() for a in self.alerts.values()],
            "groups": [asdict(g) for g in self.groups.values()],
            "recently_resolved": [a.to_state() for a in self.recently_resolved],
        }

    @classmethod
    def from_state(cls, config: NotifyConfig, state: JsonObject | None) -> Lifecycle:
        """Rebuild a lifecycle from to_state() output (None or an unknown version starts empty)."""
        lc = cls(config)
        if not state or state.get("version") != 1:
            return lc
        lc.alerts = {a.key: a for a in (TrackedFinding.from_state(x) for x in state.get("alerts", []))}
        lc.groups = {g.key: g for g in (Incident(**x) for x in state.get("groups", []))}
        lc.recently_resolved = [TrackedFinding.from_state(x) for x in state.get("recently_resolved", [])]
        return lc
