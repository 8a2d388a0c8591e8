"""Predicted effects for the advice, off the evaluation path: per-target history, a cache, a worker thread.

`observe` keeps each target's recent snapshots (cheap); `annotate` attaches the cached prediction to every advice
that names a simulatable change, and answers the relief check (`relief.apply`) at its draws: a key's `draw` is the
simulation's seed, draw 0 the advice's own prediction, a further one cached apart and never shown. Every RETRY_S the
prediction's window is looked at again: it is simulated again only when its fingerprint moved
(sharing.Fingerprint.near), a short steady stretch grew to STEADY_S, or refresh_s passed since it was simulated
(≤ RETRY_S, ≤ refresh_s/6 sooner per target in background mode, `sharing.spread`: effects simulated together expire
apart), so a prediction shown is at most refresh_s (+ the queue's wait, + a cycle) old. In background mode a look is
decided where it is asked and only a simulation is queued for the worker (and its child), none when a near window's
is queued or running (shared at the next look): an evaluation never waits for one; in sync mode (replay, check) all
is inline, on the recording's own clock. After an engine restart with another configuration, `followups` compare
what the target measures with what was predicted.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from functools import partial

from kvdoctor.samples import Sample
from kvdoctor.verdicts import Advice, Diagnosis, Effect
from kvdoctor.whatif import followup, relief
from kvdoctor.whatif.breaks import restarts
from kvdoctor.whatif.effectcache import RETRY_S, EffectCache, Key
from kvdoctor.whatif.effects import effect_of
from kvdoctor.whatif.followup import FollowUp
from kvdoctor.whatif.jobs import MAX_QUEUE, Jobs, JobsThread
from kvdoctor.whatif.ledger import Ledgers
from kvdoctor.whatif.offload import Offload
from kvdoctor.whatif.predict import predict
from kvdoctor.whatif.sharing import SharedEffects, Simulate, steady
from kvdoctor.whatif.window import Snap, snapshot
from kvdoctor.whatif.workload import WindowError

FOLLOWUP_EVERY_S = 30.0  # a follow-up is recomputed as the new configuration shows more
WINDOW_S = 120.0  # at most this much of the recent steady load is what a prediction learns its workload from
# none from a steady stretch under MIN_STEADY_S; a borderline limit's from the stretch it held (≥ VERDICT_WINDOW_S)
MIN_STEADY_S = 30.0
VERDICT_WINDOW_S = 15.0
STEADY_S = 60.0  # a prediction from a shorter steady stretch is redone once the stretch is this long


class Advisor:
    """Per-target history and cached predicted effects (thread-safe)."""

    def __init__(
        self,
        *,
        refresh_s: float = 180.0,
        history_s: float = 900.0,
        background: bool = False,
        max_queue: int = MAX_QUEUE,
        offload: Offload | None = None,
        books_only: bool = False,
        judged_from: float = -math.inf,
    ) -> None:
        self.refresh_s, self.history_s, self.background = refresh_s, history_s, background
        self.books_only = books_only  # report's books: relief verdicts only, no advice effects or intervals
        # whatif's measured class: the verdicts of a window are checked from its start; before it only the history
        self.judged_from = judged_from
        self.offload = offload  # where simulations run: a child process off the cycle's GIL (None: here)
        self._history: dict[str, deque[Snap]] = {}
        self._effects = EffectCache()  # by (target, change), with when each is looked at again
        self._lock = threading.Lock()
        # bounded, oldest dropped and counted, a key queued once (jobs.py); near windows share a simulation
        self._jobs: Jobs[Key] = Jobs(max_queue)
        self._shared = SharedEffects(refresh_s, min(RETRY_S, refresh_s / 6) if background else 0.0)
        self.worker = JobsThread(self._jobs, self.work_once, "kvdoctor-whatif")
        self._restarts: dict[str, float] = {}  # target → time of its last restart with a new configuration
        self._followups: dict[str, FollowUp] = {}
        self._failures: dict[str, str] = {}  # target -> why its last simulation raised (until one works)
        self._limits: dict[str, float] = {}  # target → since when its borderline limit has held
        self._caps: dict[str, int] = {}  # target → the --max-num-seqs its config gives (not exported by vLLM)
        self.ledger = Ledgers()  # a day of each target's step costs, from what leaves the history

    def observe(self, target: str, t: float, samples: Iterable[Sample]) -> None:
        """Keep one scrape of a target."""
        snap = snapshot(t, samples)
        with self._lock:
            h = self._history.setdefault(target, deque())
            if h and restarts([h[-1], snap]):
                self._restarts[target] = t
                self._followups.pop(target, None)
            if h and snap.info == h[-1].info:  # its 38 labels rarely change: one dict, not one a scrape
                snap.info = h[-1].info
            h.append(snap)
            self.ledger.evict(target, h, t - self.history_s)

    def snaps(self, target: str) -> list[Snap]:
        """A copy of a target's recent snapshots, oldest first (the headroom worker learns from them too)."""
        with self._lock:
            return list(self._history.get(target, ()))

    def forget(self, target: str) -> None:
        """Drop a target's history and predictions."""
        with self._lock:
            self._history.pop(target, None)
            for m in (self._failures, self._limits, self._caps, self._restarts, self._followups):
                m.pop(target, None)
            self.ledger.forget(target)
            self._shared.forget(target)
            self._effects.forget(target)

    def annotate(self, diagnoses: list[Diagnosis], t: float) -> list[Diagnosis]:
        """Attach predicted effects to the advice (and follow-ups as findings); never waits in background mode."""
        for d in diagnoses:
            self._note_limit(d)
            if not self.books_only:
                d.advice = [self._with_effect(d.target, a, t) for a in d.advice]
                for f in d.findings:
                    f.advice = [self._with_effect(d.target, a, t) for a in f.advice]
            if t >= self.judged_from:
                relief.apply(d, partial(self._relief, d.target, t))
            self._follow(d.target, t)
            fu = self._followups.get(d.target)
            if fu is not None:
                d.findings.append(fu.finding())
        return diagnoses

    def _note_limit(self, d: Diagnosis) -> None:
        cap = d.evidence.get("batch_cap_configured")
        with self._lock:  # since when a borderline limit has held (_steady_needed); forgotten when it ends
            if isinstance(cap, float) and cap > 0:  # the operator's cap: a prediction need not infer it
                self._caps[d.target] = int(cap)
            else:  # none configured (or no longer, after a reload)
                self._caps.pop(d.target, None)
            if relief.reliefs(d):
                self._limits[d.target] = d.since
            else:
                self._limits.pop(d.target, None)

    def _relief(self, target: str, t: float, change: dict[str, float | str], draw: int) -> Effect | None:
        return self._effect(Key(target, tuple(sorted(change.items())), draw), t)

    def _steady_needed(self, target: str, t: float) -> float:
        # 30 s lets a new limit's queue show its cost; a borderline limit is judged on the stretch it has held (at
        # least the pack's 15 s verdict window), so a co-binding stretch shorter than 30 s is judged too
        with self._lock:
            since = self._limits.get(target)
        return MIN_STEADY_S if since is None else min(MIN_STEADY_S, max(VERDICT_WINDOW_S, t - since))

    def followups(self) -> dict[str, FollowUp]:
        """The latest follow-up per target."""
        with self._lock:
            return dict(self._followups)

    def _follow(self, target: str, t: float) -> None:
        restart = self._restarts.get(target)
        if restart is None:
            return
        if t - restart > self.history_s:  # shown for as long as the history holds both sides
            with self._lock:
                self._restarts.pop(target, None)
                self._followups.pop(target, None)
            return
        key = Key(target, (), followup_of=restart)
        with self._lock:
            done = self._followups.get(target)
            recent = done is not None and t - done.t < FOLLOWUP_EVERY_S
            if recent or not self._effects.ask(key, t, FOLLOWUP_EVERY_S):  # computed, or asked, lately
                return
        _ = self._look(key, t) if self.background else self._compute_safely(key, t)

    def _with_effect(self, target: str, a: Advice, t: float) -> Advice:
        if not a.change:
            return a
        eff = self._effect(Key(target, tuple(sorted(a.change.items()))), t)
        return replace(a, effect=eff) if eff is not None else a

    def _effect(self, key: Key, t: float) -> Effect | None:
        with self._lock:
            eff, look = self._effects.get(key), self._effects.look(key, t)
        if look:
            eff = self._look(key, t) if self.background else self._compute_safely(key, t)
        return eff

    def _look(self, key: Key, t: float) -> Effect | None:
        # decided on the asking thread (~0.14 ms a target-cycle): kept, shared, too short a window, no follow-up case
        # yet; only what needs the child is queued (a key queued or simulating is not looked at), never behind one
        try:
            return (
                self._effects.get(key) if key in self._jobs else self._compute_safely(key, t, simulate=False)
            )
        except Simulate as miss:
            if miss.queue:  # else a near window's simulation, queued or running, answers this one
                self._submit(key, t)
            return self._effects.get(key)

    def _submit(self, key: Key, t: float) -> None:
        self.worker.submit(key, t)

    def stats(self) -> dict[str, int]:
        """The worker's counters for kvdoctor's own /metrics: dropped, computed, shared, kept requests; queue length."""
        return {
            "dropped": self._jobs.dropped_total,
            "computed": self._shared.computed_total,
            "shared": self._shared.shared_total,
            "kept": self._shared.kept_total,
            "queued": len(self._jobs),
        }

    def failures(self) -> dict[str, str]:
        """Targets whose last prediction raised, and why (cleared by the next that works)."""
        with self._lock:
            return dict(self._failures)

    def work_once(self, timeout: float | None = None) -> bool:
        """Serve the oldest queued request, with its target's others, waiting up to timeout; False when none came."""
        job = self._jobs.get(timeout)
        if job is None:
            return False
        # the target's other changes waiting: computed now from one history, so from one learned window
        jobs = [job, *self._jobs.take(job[0].target, lambda k: k.target)]
        history = self.snaps(job[0].target)
        for key, t in jobs:
            try:
                if key.target in self._history:  # not a target removed while its prediction waited
                    self._compute_safely(key, t, history)
            finally:
                self._jobs.done(key)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Stop the worker thread: queued requests are dropped, a simulation under way ends first (up to timeout)."""
        self.worker.close(timeout)

    def _compute_safely(
        self, key: Key, t: float, history: list[Snap] | None = None, simulate: bool = True
    ) -> Effect | None:
        # one target's history must not end the thread every target's predictions run on
        try:
            eff = self._compute(key, t, history, simulate)
        except Simulate:
            raise
        except Exception as exc:
            with self._lock:
                self._effects.fail(key)
                self._failures[key.target] = f"{type(exc).__name__}: {exc}"
            return None
        with self._lock:
            self._failures.pop(key.target, None)
        return eff

    def _compute(
        self, key: Key, t: float, history: list[Snap] | None = None, simulate: bool = True
    ) -> Effect | None:
        target, change, draw = key.target, key.change, key.draw
        with self._lock:
            history = list(self._history.get(target, ())) if history is None else history
            cap = self._caps.get(target)
        if key.followup_of is not None:  # a prediction too: in the child, off the cycle's GIL
            fu = followup.checked(target, history, key.followup_of, self.offload, simulate)
            if fu is not None:
                with self._lock:
                    self._followups[target] = fu
            return None
        eff, young = None, False
        ready = None  # when a steady stretch found too short will be long enough
        try:
            history, lo, hi = steady(history, WINDOW_S)
            need = self._steady_needed(target, t)
            if hi - lo < need:  # a limit that just appeared: its cost not shown yet
                ready = t + need - (hi - lo)
                raise WindowError("the load has not held long enough")
            young = hi - lo < STEADY_S
            window = [s for s in history if lo <= s.t <= hi]
            fp, recall = self._shared.fingerprint(target, window, cap), self.ledger.recall(target)
            # this target's last window, or a replica's, near this one was simulated less than refresh_s ago
            asked = key.shared_by()  # a relief's further draw is shared apart from draw 0, as cached apart
            eff = self._shared.get(fp, asked, t, young, self._effects.get(key), target)
            if eff is None and not simulate:
                raise Simulate(not self._shared.waits(fp, asked, young, key, self._jobs.__contains__))
            if eff is None:
                knobs = dict(change)
                points = self.books_only or draw > 0  # a relief's further draw: its point values only
                run = partial(predict, max_num_seqs=cap, with_intervals=not points, recall=recall, seed=draw)
                args = (history, window, knobs)
                p = self.offload.run(run, *args) if self.offload is not None else run(*args)
                eff = effect_of(p, knobs, t)
                self._shared.put(fp, asked, eff, young)
        except (WindowError, ValueError, ZeroDivisionError, RuntimeError):
            eff = None  # not enough traffic yet, or the simulation child is gone (interpreter shutdown): asked again
        with (
            self._lock
        ):  # a limit still held keeps its effect; looked at again RETRY_S on, simulated at refresh_s
            since = self._limits.get(target)
            return self._effects.put(key, eff, t, ready, since, partial(self._shared.expires, target))
