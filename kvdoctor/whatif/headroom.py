"""SLO headroom and replicas needed per target, for autoscalers: computed off the evaluation path, shared by fingerprint.

`annotate` (each cycle) asks for a result per target with SLOs when its last one is older than `refresh_s`, and
attaches the fresh result to the diagnosis: evidence keys the /metrics collector turns into
`kvdoctor_slo_headroom_ratio` and `kvdoctor_replicas_needed`, and an advice line for the page, API and Slack.
A result is dropped, so its series vanish, when the steady window was too short, the step-time fit too poor, or it
is older than STALE_AFTER refresh periods: an autoscaler reading an absent series holds its scale (HPA does no
scaling on a metric it cannot read; KEDA falls back), where a stale number would keep scaling on old traffic.
One worker thread computes; its queue (`jobs.Jobs`, as the advisor's) is bounded and drops the oldest request
(counted). Targets with the same
model, configuration and SLOs and near traffic and step times (`sharing.Fingerprint.near`) share one computation.
In background mode a target's result is due up to refresh_s/6 sooner (`sharing.spread`, fixed per target, as the
advisor's effects): results computed together come due apart, so a refresh is not one wave of a fleet's requests.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from kvdoctor.verdicts import LIMITS, Advice, Diagnosis
from kvdoctor.whatif.jobs import Jobs, JobsThread
from kvdoctor.whatif.learn import learned
from kvdoctor.whatif.ledger import Recall
from kvdoctor.whatif.offload import Offload
from kvdoctor.whatif.plan import MAX_LOAD, MAX_REPLICAS, Planner
from kvdoctor.whatif.sharing import Fingerprint, Nearby, fingerprint, spread, steady
from kvdoctor.whatif.window import Snap
from kvdoctor.whatif.workload import WindowError

STALE_AFTER = 3.0  # refresh periods after which a result is no longer exported
MAX_RESIDUAL = 0.5  # a step-time fit whose relative RMS error is above this is not trusted
WINDOW_S, MIN_STEADY_S = 120.0, 30.0  # as the advisor: the recent steady load, and no less than this of it
RETRY_S = 15.0  # a target whose window could not be learned from is tried again this soon
EVIDENCE = "slo_headroom_"  # evidence key prefix: slo_headroom_<slo> = load multiple at which that SLO breaks
Wants = dict[
    str, tuple[dict[str, float], int | None]
]  # target → (SLO seconds by name, max_num_seqs if known)


@dataclass(frozen=True)
class Headroom:
    """One target's answer: the load multiple at which each SLO breaks, and the replicas that hold them all."""

    slos: dict[str, float]  # name (ttft_p95) → objective in seconds
    ratios: dict[str, float]
    replicas_needed: int | None
    replicas_now: int
    t: float
    shared_from: str = ""  # another target whose identical computation this reuses

    def evidence(self) -> dict[str, float | str]:
        """Evidence keys for the diagnosis (and so /metrics and the API)."""
        ev: dict[str, float | str] = {f"{EVIDENCE}{k}": round(v, 3) for k, v in self.ratios.items()}
        ev["slo_headroom_timestamp"] = self.t
        if self.replicas_needed is not None:
            ev["replicas_needed"] = float(self.replicas_needed)
        return ev

    def advice(self) -> Advice:
        """One line for the page and Slack: where each SLO breaks and how many replicas hold them."""
        parts = []
        for k, v in self.ratios.items():
            at = f"beyond ×{MAX_LOAD:g}" if v >= MAX_LOAD else f"at ×{v:.2f}"
            name, q = k.rsplit("_", 1)
            parts.append(f"{name.upper()} {q} ≤ {self.slos[k]:g} s breaks {at} today's traffic")
        n = self.replicas_needed
        need = (
            f"more than {MAX_REPLICAS} replicas" if n is None else f"`{n}` replica(s)"
        ) + " hold every SLO"
        return Advice(
            "",
            f"Headroom: {'; '.join(parts)}; {need} now ({self.replicas_now} run).",
            source="what-if simulation of the recent window",
        )


class HeadroomWorker:
    """Per-target headroom results, refreshed by one worker thread (or inline in sync mode)."""

    def __init__(
        self,
        history: Callable[[str], list[Snap]],
        *,
        refresh_s: float = 180.0,
        max_queue: int = 256,
        background: bool = False,
        offload: Offload | None = None,
        recall: Callable[[str], Recall | None] | None = None,
    ) -> None:
        self.history, self.refresh_s, self.background = history, refresh_s, background
        self.spread_s = (
            refresh_s / 6 if background else 0.0
        )  # a target's result is due up to this much sooner
        # a target's step ledger (the advisor's), for the batches its history does not show
        self.recall = recall
        self.offload = offload  # where the search runs: a child process off the cycle's GIL (None: here)
        self._lock = threading.Lock()
        self._jobs: Jobs[str] = Jobs(max_queue)  # targets, each queued once until searched
        self._asks: dict[
            str, tuple[str, dict[str, float], int | None]
        ] = {}  # target → (model, SLOs, max_num_seqs)
        self._results: dict[str, Headroom] = {}
        self._failures: dict[str, str] = {}  # target → why its last search raised (until one works)
        self._asked: dict[str, float] = {}
        # (target, result) of the searches lately made, found again by windows near theirs
        self._searched: Nearby[tuple[str, Headroom]] = Nearby(refresh_s, lambda s: s[1].t)
        self.worker = JobsThread(self._jobs, self.work_once, "kvdoctor-headroom")
        self.computed_total = self.shared_total = 0

    def annotate(self, diagnoses: list[Diagnosis], t: float, wants: Wants) -> list[Diagnosis]:
        """Ask for what is due (targets at a limit first) and attach every fresh result; never waits in background mode."""
        # the queue is first come, first served: a target at a limit is the one whose headroom is needed now
        for d in sorted(diagnoses, key=lambda d: d.verdict not in LIMITS):
            slos, seqs = wants.get(d.target, ({}, None))
            if slos:
                self._want(d.target, d.model_name, slos, seqs, t)
        for d in diagnoses:
            slos = wants.get(d.target, ({}, None))[0]
            if not slos:
                continue
            with self._lock:
                h = self._results.get(d.target)
            if h is None or t - h.t > STALE_AFTER * self.refresh_s or h.slos != slos:
                continue
            d.evidence.update(h.evidence())
            d.advice = [*d.advice, h.advice()]
        return diagnoses

    def forget(self, target: str) -> None:
        """Drop a removed target's result."""
        with self._lock:
            self._results.pop(target, None)
            self._asked.pop(target, None)
            self._asks.pop(target, None)
            self._failures.pop(target, None)

    def failures(self) -> dict[str, str]:
        """Targets whose last search raised, and why (cleared by the next that works)."""
        with self._lock:
            return dict(self._failures)

    def stats(self) -> dict[str, int]:
        """Counters for kvdoctor's own /metrics."""
        with self._lock:
            return {
                "dropped": self._jobs.dropped_total,
                "computed": self.computed_total,
                "shared": self.shared_total,
                "queued": len(self._jobs),
            }

    def _want(self, target: str, model: str, slos: dict[str, float], seqs: int | None, t: float) -> None:
        if self._jobs.closed or target in self._jobs:
            return
        with self._lock:
            done = self._results.get(target)
            if t - self._asked.get(target, -math.inf) < RETRY_S:
                return
            if (
                done is not None
                and done.slos == slos
                and t - done.t < self.refresh_s - spread(target, self.spread_s)
            ):
                return
            self._asked[target] = t
            self._asks[target] = (model, slos, seqs)
        if not self.background:
            self._compute(target, model, slos, seqs, t)
        else:
            self.worker.submit(target, t)

    def work_once(self, timeout: float | None = None) -> bool:
        """Search the oldest queued target, waiting up to timeout for one; False when none came."""
        job = self._jobs.get(timeout)
        if job is None:
            return False
        target, t = job
        with self._lock:
            ask = self._asks.get(target)  # None: the target was removed while it waited
        try:
            if ask is not None:
                self._compute(target, *ask, t)
        finally:
            self._jobs.done(target)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Stop the worker thread: queued requests are dropped, a search under way ends first (up to timeout)."""
        self.worker.close(timeout)

    def _compute(self, target: str, model: str, slos: dict[str, float], seqs: int | None, t: float) -> None:
        try:
            h = self._headroom(target, model, slos, seqs, t)
        except (WindowError, ValueError, ZeroDivisionError):
            h = None  # too little steady traffic, or a fit not to be trusted: its series vanish
        except RuntimeError:  # the simulation child is gone (interpreter shutdown): asked again
            h = None
        except Exception as exc:  # one target's search must not end the thread every target's runs on
            with self._lock:
                self._failures[target] = f"{type(exc).__name__}: {exc}"
                self._results.pop(target, None)
            return
        with self._lock:
            self._failures.pop(target, None)
            if h is None:
                self._results.pop(target, None)
            else:
                self._results[target] = h

    def _headroom(
        self, target: str, model: str, slos: dict[str, float], seqs: int | None, t: float
    ) -> Headroom:
        history, lo, hi = steady(self.history(target), WINDOW_S)  # the engine as it runs now, its recent load
        if hi - lo < MIN_STEADY_S:
            raise WindowError("the load has not held long enough")
        window = [s for s in history if lo <= s.t <= hi]
        recall = self.recall(target) if self.recall is not None else None
        # not keyed by the ledger: replicas of one engine share a search, their ledgers differ by their noise only
        fp = _fingerprint(model, slos, seqs, window)
        with self._lock:  # a window near this one (a replica's, or this target's last) was searched lately
            seen = self._searched.find(fp.same, fp, t, sooner_s=spread(target, self.spread_s))
            if seen is not None:
                self.shared_total += 1
                return replace(seen[1], shared_from=seen[0])
        args = (history, window, seqs, slos, recall)
        ratios, needed, replicas = self.offload.run(search, *args) if self.offload else search(*args)
        h = Headroom(dict(slos), ratios, needed, replicas, t)
        with self._lock:
            self.computed_total += 1
            self._searched.add(fp.same, fp, (target, h))
        return h


def search(
    history: list[Snap],
    window: list[Snap],
    seqs: int | None,
    slos: dict[str, float],
    recall: Recall | None = None,
) -> tuple[dict[str, float], int | None, int]:
    """The headroom search on one window: the load multiple breaking each SLO, replicas needed, replicas now."""
    # the same learned window as the advisor's predictions of it
    basis = learned(history, window, max_num_seqs=seqs, recall=recall)
    if not basis.step.residual_ratio <= MAX_RESIDUAL:
        raise WindowError(f"step-time fit error {basis.step.residual_ratio:.0%}")
    planner = Planner(basis, {f"{k}_s": v for k, v in slos.items()})
    return {k: planner.headroom(f"{k}_s") for k in slos}, planner.replicas_needed(), basis.replicas


def _fingerprint(model: str, slos: dict[str, float], seqs: int | None, window: list[Snap]) -> Fingerprint:
    """What decides the answer: the model and SLOs, and the advisor's fingerprint of the window (configuration,
    engine settings, traffic and step times, near within sharing.NEAR)."""
    fp = fingerprint(window, seqs)
    return replace(fp, same=(*fp.same, model, tuple(sorted(slos.items()))))
