"""What the daemon knows right now, shared between the cycle thread and the web, metrics and notify sinks."""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, replace

from kvdoctor.diagnosis.target import Target
from kvdoctor.signals import SIGNALS
from kvdoctor.status.health import FileHealth, ReloadAttempt
from kvdoctor.verdicts import Diagnosis
from kvdoctor.whatif.advisor import Advisor
from kvdoctor.whatif.ledger import Held

RELOADS_KEPT = 20  # reload attempts shown in /api/v1/status
FAILED_CYCLES_UNREADY = 3  # cycles failing in a row before /-/ready says 503


@dataclass(frozen=True)
class Snapshot:
    """A consistent copy of what the daemon knows, for its readers: the page, the JSON API and /metrics."""

    diagnoses: list[Diagnosis]
    targets: dict[str, Target]
    evaluation_ts: float | None
    evaluation_duration_s: float | None
    rule_failures_total: int
    rule_failures: dict[str, int]  # per rule name
    failed_cycles: int  # in a row, up to now
    cycle_error: str  # why the last cycle failed ("" when it worked)
    reload_ok: bool
    reload_ts: float | None
    reload_success_ts: float | None
    reload_error: str
    reloads: list[ReloadAttempt]  # the last RELOADS_KEPT attempts
    reloads_total: dict[str, int]  # success / failure
    cycle_duration_s: float | None
    interval_s: float | None
    scheduler_events: dict[str, int]
    headroom_stats: dict[str, int]
    whatif_stats: dict[str, int]  # the advisor's simulations: computed, shared, dropped, queued
    step_ledger: dict[str, Held]  # per target: what the advisor's step ledger holds
    ready: bool
    storage: dict[str, FileHealth]  # the files kvdoctor writes (state, outbox) → their health
    storage_problem: str


class DaemonState:
    """A lock-protected snapshot; writers replace whole values, readers copy."""

    def __init__(self, history_points: int = 240) -> None:
        self._lock = threading.Lock()
        self.diagnoses: list[Diagnosis] = []
        self.targets: dict[str, Target] = {}
        self.evaluation_ts: float | None = None
        self.evaluation_duration_s: float | None = None
        self.rule_failures_total = 0
        self.rule_failures: Counter[str] = Counter()  # per rule name
        self.failed_cycles = 0  # in a row, up to now
        self.cycle_error = ""  # why the last cycle failed ("" when it worked)
        self.reload_ok = True
        self.reload_ts: float | None = None  # the last attempt, whatever its outcome
        self.reload_success_ts: float | None = None
        self.reload_error = ""
        self.reloads: deque[ReloadAttempt] = deque(maxlen=RELOADS_KEPT)
        self.reloads_total: Counter[str] = Counter()
        self.cycle_duration_s: float | None = None
        self.interval_s: float | None = None
        self.scheduler_events: Counter[str] = Counter()
        self.headroom_stats: dict[str, int] = {}  # the SLO headroom worker's counters
        self.whatif_stats: dict[str, int] = {}  # the advisor's simulation worker's counters
        self.step_ledger: dict[str, Held] = {}
        self.started_ts: float | None = None
        self.ready = False
        self.storage: dict[str, FileHealth] = {}  # the files kvdoctor writes: state, outbox → their health
        self.storage_problem = ""  # why /-/ready says no because of them ('' when it does not)
        self._history: dict[tuple[str, str], deque[dict[str, float]]] = {}
        self._points = history_points

    def publish(
        self, diagnoses: list[Diagnosis], t: float, duration_s: float, rule_failures: int | list[str]
    ) -> None:
        """Record one evaluation (duration_s: of the rule evaluation and classification; rule_failures: the names
        of the rules that failed in it, or how many)."""
        with self._lock:
            self.diagnoses = list(diagnoses)
            self.evaluation_ts, self.evaluation_duration_s = t, duration_s
            failed = rule_failures if isinstance(rule_failures, list) else [""] * rule_failures
            self.rule_failures_total += len(failed)
            self.rule_failures.update(failed)
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

    def set_targets(self, targets: Iterable[Target]) -> None:
        """Publish a copy of each target."""
        with self._lock:
            for target in targets:
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

    def snapshot(self) -> Snapshot:
        """A consistent copy of everything, for readers."""
        with self._lock:
            return Snapshot(
                diagnoses=list(self.diagnoses),
                targets={k: replace(v) for k, v in self.targets.items()},
                evaluation_ts=self.evaluation_ts,
                evaluation_duration_s=self.evaluation_duration_s,
                rule_failures_total=self.rule_failures_total,
                rule_failures=dict(self.rule_failures),
                failed_cycles=self.failed_cycles,
                cycle_error=self.cycle_error,
                reload_ok=self.reload_ok,
                reload_ts=self.reload_ts,
                reload_success_ts=self.reload_success_ts,
                reload_error=self.reload_error,
                reloads=list(self.reloads),
                reloads_total=dict(self.reloads_total),
                cycle_duration_s=self.cycle_duration_s,
                interval_s=self.interval_s,
                scheduler_events=dict(self.scheduler_events),
                headroom_stats=dict(self.headroom_stats),
                whatif_stats=dict(self.whatif_stats),
                step_ledger=dict(self.step_ledger),
                ready=self.ready,
                storage=dict(self.storage),
                storage_problem=self.storage_problem,
            )

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
            self.reloads.append(ReloadAttempt(t, ok, message or error or "reloaded"))
            self.reloads_total["success" if ok else "failure"] += 1

    def note_cycle(self, duration_s: float, interval_s: float) -> None:
        """Record how long one cycle took against the interval it has to fit in."""
        with self._lock:
            self.cycle_duration_s, self.interval_s = duration_s, interval_s

    def note_cycle_failure(self, error: str | None) -> bool:
        """Record that a cycle failed (and why) or worked (None); True when the failure is new or changed."""
        with self._lock:
            changed = error is not None and error != self.cycle_error
            self.failed_cycles = self.failed_cycles + 1 if error is not None else 0
            self.cycle_error = error or ""
            return changed

    def readiness(self) -> tuple[bool, str]:
        """Whether /-/ready should say ready, and why not."""
        with self._lock:
            if not self.ready:
                return False, "kvdoctor is not ready: no evaluation yet."
            if self.failed_cycles >= FAILED_CYCLES_UNREADY:
                return False, (
                    f"kvdoctor is not ready: the last {self.failed_cycles} evaluation cycles failed: "
                    f"{self.cycle_error}"
                )
            if self.storage_problem:
                return False, f"kvdoctor is not ready: {self.storage_problem}."
            return True, "kvdoctor is Ready."

    def note_headroom(self, stats: dict[str, int]) -> None:
        """Record the SLO headroom worker's counters (dropped, computed, shared requests; queue length)."""
        with self._lock:
            self.headroom_stats = dict(stats)

    def note_whatif(self, stats: dict[str, int], ledger: dict[str, Held] | None = None) -> None:
        """Record the advisor's simulation worker's counters (dropped, computed, shared requests; queue length)
        and what its step ledger holds per target."""
        with self._lock:
            self.whatif_stats = dict(stats)
            self.step_ledger = dict(ledger or {})

    def note_advisor(self, advisor: Advisor | None) -> None:
        """Record the advisor's worker counters and its step ledger (none: the daemon predicts nothing)."""
        if advisor is None:
            self.note_whatif({})
        else:
            self.note_whatif(advisor.stats(), advisor.ledger.held())

    def count_event(self, event: str, n: int = 1) -> None:
        """Count a scheduling event: `missed` (slots an overlong cycle ate), `error` (a cycle that raised)."""
        with self._lock:
            self.scheduler_events[event] += n

    def note_storage(self, files: dict[str, FileHealth], problem: str) -> None:
        """Record the health of the files kvdoctor writes, and why readiness fails because of them ('' if not)."""
        with self._lock:
            self.storage, self.storage_problem = files, problem
