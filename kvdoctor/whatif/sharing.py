"""The advisor's worker, bounded and shared: a queue that drops its oldest request (counted), one simulation per fingerprint.

A fleet-wide incident puts every target at a limit at once, each with advice naming a change and its reliefs:
thousands of simulations asked for in one cycle. Replicas of one model, configuration and traffic would all
simulate the same thing, so a result is shared by every window whose fingerprint is near (`Fingerprint.near`: the
same configuration, traffic and step times within NEAR) while it is fresh, the target's own next window included: a
rolling window's noise, or a replica's other scrape phase, is not a new simulation (`Nearby`, which the headroom
worker's searches use too). The queue holds at most `maxlen` requests; past that the oldest is dropped and counted
(the advisor asks again the next cycle), so a fleet slower to simulate than its cycles costs neither memory nor an
ever older queue.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kvdoctor.errors import KvdoctorError
from kvdoctor.verdicts import Effect
from kvdoctor.whatif.sources import default_window
from kvdoctor.whatif.window import Snap, measure, restarts
from kvdoctor.whatif.workload import WindowError, infer_engine, infer_workload

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
MAX_QUEUE = 4096  # a few requests per target (the advice's change and each relief) of a 1,000-target fleet
# a measured number within this share of a simulated window's is the same prediction's input: wider than a
# replica's scrape phase or a rolling window's noise, narrower than a change of traffic worth a new simulation
NEAR = 0.05
PREFIX_NEAR = 0.05  # the prefix-cache hit share, in absolute points


class Simulate(KvdoctorError):
    """A look found no fresh answer for its window: the request needs the worker and the simulation child."""


class Jobs(Generic[K]):
    """A FIFO of keys for one worker thread: a key is queued once until done; when full, the oldest is dropped."""

    def __init__(self, maxlen: int = MAX_QUEUE) -> None:
        self.maxlen = maxlen
        self._cv = threading.Condition()
        self._queue: deque[tuple[K, float]] = deque()
        # queued or being computed: asked again meanwhile, it is not queued twice
        self._pending: set[K] = set()
        self.dropped_total = 0

    def put(self, key: K, t: float) -> bool:
        """Queue key (asked at t) unless it is pending already; False when it was."""
        with self._cv:
            if key in self._pending:
                return False
            if len(self._queue) >= self.maxlen:
                old, _ = self._queue.popleft()  # the oldest request is the one a newer cycle will ask again
                self._pending.discard(old)
                self.dropped_total += 1
            self._queue.append((key, t))
            self._pending.add(key)
            self._cv.notify()
            return True

    def get(self, timeout: float | None = None) -> tuple[K, float] | None:
        """The oldest request, waiting up to timeout for one (None when none came); pending until done()."""
        with self._cv:
            if not self._cv.wait_for(lambda: bool(self._queue), timeout):
                return None
            return self._queue.popleft()

    def take(self, group: Hashable, of: Callable[[K], Hashable]) -> list[tuple[K, float]]:
        """Every queued request whose key is of this group, oldest first, out of the queue (pending until done())."""
        with self._cv:
            out = [job for job in self._queue if of(job[0]) == group]
            if out:
                self._queue = deque(job for job in self._queue if of(job[0]) != group)
            return out

    def done(self, key: K) -> None:
        """The request for key is computed: it may be queued again."""
        with self._cv:
            self._pending.discard(key)

    def __len__(self) -> int:
        with self._cv:
            return len(self._queue)

    def __contains__(self, key: object) -> bool:
        with self._cv:  # queued or being computed
            return key in self._pending


@dataclass(frozen=True)
class Fingerprint:
    """What decides a prediction: `same` must be equal (configuration, engine settings, the load's shape, engines,
    the operator's cap); the measured numbers need only be near (`near`)."""

    same: tuple[object, ...]
    rate_per_s: float  # arrivals (open loop) or answers (closed loop) per second
    population: float  # clients (closed loop; 0 for an open loop)
    prompt: float  # mean prompt and output tokens
    output: float
    prefix_hit: float  # share of prompt tokens served from the prefix cache
    itl_p50_s: float  # stand for the step times the prediction fits: they tell models and hardware apart
    ttft_p50_s: float

    def near(self, other: Fingerprint) -> bool:
        """The same prediction's inputs: `same` equal, each measured number within NEAR of the other's (the prefix
        hit share within PREFIX_NEAR); a measurement absent from both is the same."""
        pairs = (
            (self.rate_per_s, other.rate_per_s),
            (self.population, other.population),
            (self.prompt, other.prompt),
            (self.output, other.output),
            (self.itl_p50_s, other.itl_p50_s),
            (self.ttft_p50_s, other.ttft_p50_s),
        )
        return (
            self.same == other.same
            and all(_close(a, b, NEAR * max(abs(a), abs(b))) for a, b in pairs)
            and _close(self.prefix_hit, other.prefix_hit, PREFIX_NEAR)
        )


def _close(a: float, b: float, tol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= tol


def fingerprint(window: list[Snap], cap: int | None = None) -> Fingerprint:
    """What decides a prediction from this window with this configured cap. Raises WindowError where a prediction
    would (too few requests, no cache info)."""
    w = infer_workload(window)
    e, _ = infer_engine(window)
    q = measure(window)
    info = window[-1].info
    config = tuple(sorted((k, v) for k, v in info.items() if k not in ("engine",)))
    return Fingerprint(
        (config, e, w.kind, max(1, window[-1].engines), cap),
        w.rate_per_s,
        float(w.population),
        w.prompt.mean,
        w.output.mean,
        w.prefix_hit_ratio,
        q.itl_p50_s,
        q.ttft_p50_s,
    )


def steady(history: list[Snap], window_s: float) -> tuple[list[Snap], float, float]:
    """The engine as it runs now (the history since its last restart) and the stretch (lo, hi) in which its load has
    held lately, at most window_s long; raises WindowError on too little history."""
    cuts = restarts(history)
    history = history[cuts[-1] :] if cuts else history
    if len(history) < 5:
        raise WindowError("too little history")
    lo, hi = default_window(history)  # the load as it has held lately, not the ramp into it
    return history, max(lo, hi - window_s), hi


class Nearby(Generic[V]):
    """Results by a key of what must be equal, each found again for refresh_s by every window whose fingerprint is
    near the one it came from (not locked: its owner holds its own lock)."""

    def __init__(self, refresh_s: float, when: Callable[[V], float]) -> None:
        self.refresh_s, self._when = refresh_s, when  # when: the time a result was made
        self._by: dict[Hashable, list[tuple[Fingerprint, V]]] = {}

    def find(
        self, key: Hashable, fp: Fingerprint, t: float, accept: Callable[[V], bool] | None = None
    ) -> V | None:
        """The latest result made less than refresh_s before t from a window near fp (and accepted), or None."""
        found = [
            v
            for f, v in self._by.get(key, ())
            if t - self._when(v) < self.refresh_s and (accept is None or accept(v)) and f.near(fp)
        ]
        return max(found, key=self._when, default=None)

    def add(self, key: Hashable, fp: Fingerprint, value: V, prune_over: int = 0) -> None:
        """Keep value for the windows near fp, dropping the key's results past refresh_s (and, once there are more
        than prune_over keys, the keys whose latest is past it: configurations that moved on)."""
        t = self._when(value)
        fresh = [(f, v) for f, v in self._by.get(key, ()) if t - self._when(v) < self.refresh_s]
        self._by[key] = [*fresh, (fp, value)]
        if len(self._by) > prune_over:
            for k in [k for k, vs in self._by.items() if t - self._when(vs[-1][1]) >= self.refresh_s]:
                del self._by[k]


@dataclass(frozen=True)
class _Entry:
    young: bool  # learned from a steady stretch under the advisor's STEADY_S
    effect: Effect


class SharedEffects:
    """Predicted effects by change, reused for refresh_s by every window whose fingerprint is near the one that was
    simulated (the target's own next window, or another replica's)."""

    def __init__(self, refresh_s: float) -> None:
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._effects: Nearby[_Entry] = Nearby(refresh_s, lambda e: e.effect.t)  # by (fp.same, change)
        self._fps: dict[str, tuple[tuple[float, float], Fingerprint]] = {}  # target → its window's, once
        self.computed_total = self.shared_total = self.kept_total = 0

    def fingerprint(self, target: str, window: list[Snap], cap: int | None = None) -> Fingerprint:
        """The window's fingerprint, computed once per target and window (its reliefs ask for the same one)."""
        span = (window[0].t, window[-1].t)
        with self._lock:
            got = self._fps.get(target)
        if got is not None and got[0] == span and got[1].same[-1] == cap:
            return got[1]
        fp = fingerprint(window, cap)
        with self._lock:
            self._fps[target] = (span, fp)
        return fp

    def get(
        self, fp: Fingerprint, change: Hashable, t: float, young: bool, mine: Effect | None = None
    ) -> Effect | None:
        """The freshest effect simulated less than refresh_s ago from a window near fp (from a full steady stretch
        unless this one is young too), or None. Counted as kept when it is `mine` (the asker's own), else shared."""
        with self._lock:
            found = self._effects.find((fp.same, change), fp, t, lambda e: young or not e.young)
            if found is None:
                return None
            eff = found.effect
            if eff is mine:
                self.kept_total += 1
            else:
                self.shared_total += 1
            return eff

    def put(self, fp: Fingerprint, change: Hashable, eff: Effect, young: bool) -> None:
        """Keep a simulated effect for the windows near fp; forget those past refresh_s."""
        with self._lock:
            self.computed_total += 1
            self._effects.add((fp.same, change), fp, _Entry(young, eff), prune_over=64)

    def forget(self, target: str) -> None:
        """Drop a removed target's cached fingerprint."""
        with self._lock:
            self._fps.pop(target, None)
