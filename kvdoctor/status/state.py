"""What the daemon knows right now, shared between the cycle thread and the web, metrics and notify sinks."""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import replace
from typing import Any

from kvdoctor.diagnosis.target import Target
from kvdoctor.signals import SIGNALS
from kvdoctor.verdicts import Diagnosis

RELOADS_KEPT = 20  # reload attempts shown in /api/v1/status


class DaemonState:
    """A lock-protected snapshot; writers replace whole values, readers copy."""

    def __init__(self, history_points: int = 240) -> None:
        self._lock = threading.Lock()
        self.diagnoses: list[Diagnosis] = []
        self.targets: dict[str, Target] = {}
        self.evaluation_ts: float | None = None
        self.evaluation_duration_s: float | None = None
        self.rule_failures_total = 0
        self.reload_ok = True
        self.reload_ts: float | None = None  # the last attempt, whatever its outcome
        self.reload_success_ts: float | None = None
        self.reload_error = ""
        self.reloads: deque[dict[str, Any]] = deque(maxlen=RELOADS_KEPT)
        self.reloads_total: Counter[str] = Counter()
        self.cycle_duration_s: float | None = None
        self.interval_s: float | None = None
        self.scheduler_events: Counter[str] = Counter()
        self.headroom_stats: dict[str, int] = {}  # the SLO headroom worker's counters
        self.started_ts: float | None = None
        self.ready = False
        self._history: dict[tuple[str, str], deque[dict[str, float]]] = {}
        self._points = history_points

    def publish(self, diagnoses: list[Diagnosis], t: float, duration_s: float, rule_failures: int) -> None:
        """Record one evaluation (duration_s: of the rule evaluation and classification)."""
        with self._lock:
            self.diagnoses = list(diagnoses)
            self.evaluation_ts, self.evaluation_duration_s = t, duration_s
            self.rule_failures_total += rule_failures
            charted = {k for k, s in SIGNALS.items() if s.history}
            for d in diagnoses:
                ring = self._history.setdefault((d.target, d.model_name), deque(maxlen=self._points))
                point: dict[str, float] = {"t": t}
                point.update(
                    {
                        k: float(v)
                        for k, v in d.evidence.items()
                        if k in charted and isinstance(v, int | float)
                    }
                )
                ring.append(point)
            self.ready = True

    def set_target(self, target: Target) -> None:
        """Publish a copy of one target (its facts and scrape health)."""
        with self._lock:
            self.targets[target.name] = replace(target)

    def target(self, name: str) -> Target | None:
        """A copy of one target (facts and scrape health)."""
        with self._lock:
            t = self.targets.get(name)
            return replace(t) if t is not None else None

    def drop_target(self, name: str) -> None:
        """Forget a removed target and its history."""
        with self._lock:
            self.targets.pop(name, None)
            for key in [k for k in self._history if k[0] == name]:
                del self._history[key]
            self.diagnoses = [d for d in self.diagnoses if d.target != name]

    def snapshot(self) -> dict[str, Any]:
        """A consistent copy of everything, for readers."""
        with self._lock:
            return {
                "diagnoses": list(self.diagnoses),
                "targets": {k: replace(v) for k, v in self.targets.items()},
                "evaluation_ts": self.evaluation_ts,
                "evaluation_duration_s": self.evaluation_duration_s,
                "rule_failures_total": self.rule_failures_total,
                "reload_ok": self.reload_ok,
                "reload_ts": self.reload_ts,
                "reload_success_ts": self.reload_success_ts,
                "reload_error": self.reload_error,
                "reloads": list(self.reloads),
                "reloads_total": dict(self.reloads_total),
                "cycle_duration_s": self.cycle_duration_s,
                "interval_s": self.interval_s,
                "scheduler_events": dict(self.scheduler_events),
                "headroom_stats": dict(self.headroom_stats),
                "ready": self.ready,
            }

    def history(self, target: str, model_name: str) -> list[dict[str, float]]:
        """Chart points of one (target, model), oldest first."""
        with self._lock:
            return list(self._history.get((target, model_name), ()))

    def note_reload(self, ok: bool, t: float, error: str = "", message: str = "") -> None:
        """Record a config/rules reload attempt: when, whether it applied, and what it said."""
        with self._lock:
            self.reload_ok, self.reload_error, self.reload_ts = ok, error, t
            if ok:
                self.reload_success_ts = t
            self.reloads.append({"ts": t, "ok": ok, "message": message or error or "reloaded"})
            self.reloads_total["success" if ok else "failure"] += 1

    def note_cycle(self, duration_s: float, interval_s: float) -> None:
        """Record how long one cycle took against the interval it has to fit in."""
        with self._lock:
            self.cycle_duration_s, self.interval_s = duration_s, interval_s

    def note_headroom(self, stats: dict[str, int]) -> None:
        """Record the SLO headroom worker's counters (dropped, computed, shared requests; queue length)."""
        with self._lock:
            self.headroom_stats = dict(stats)

    def count_event(self, event: str, n: int = 1) -> None:
        """Count a scheduling event: `missed` (slots an overlong cycle ate), `error` (a cycle that raised)."""
        with self._lock:
            self.scheduler_events[event] += n
