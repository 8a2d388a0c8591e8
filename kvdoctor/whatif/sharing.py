"""The advisor's worker, bounded and shared: a queue that drops its oldest request (counted), one simulation per fingerprint.

A fleet-wide incident puts every target at a limit at once, each with advice naming a change and its reliefs:
thousands of simulations asked for in one cycle. Replicas of one model, configuration and traffic would all
simulate the same thing, so a result is shared by every window whose fingerprint is near (`Fingerprint.near`: the
same configuration, traffic and step times within NEAR) while it is fresh, the target's own next window included: a
rolling window's noise, or a replica's other scrape phase, is not a new simulation (`Nearby`, which the headroom
worker's searches use too). The queue holds at most `maxlen` requests; past that the oldest is dropped and counted
(the advisor asks again the next cycle), so a fleet slower to simulate than its cycles costs neither memory nor an
ever older queue. A miss near a simulation already queued or running waits for it (`SharedEffects.waits`) instead of
queueing its own, and `spread` staggers when effects simulated together expire, so neither the workers' start nor a
refresh queues a wave of replicas' misses.
"""

from __future__ import annotations

import math
import threading
import zlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kvdoctor.errors import KvdoctorError
from kvdoctor.verdicts import Effect
from kvdoctor.whatif.breaks import restarts
from kvdoctor.whatif.plateau import load_shares
from kvdoctor.whatif.sources import default_window
from kvdoctor.whatif.window import Snap, measure
from kvdoctor.whatif.workload import WindowError, infer_engine, infer_workload

V = TypeVar("V")
# a measured number within this share of a simulated window's is the same prediction's input: wider than a
# replica's scrape phase or a rolling window's noise, narrower than a change of traffic worth a new simulation
NEAR = 0.05
PREFIX_NEAR = 0.05  # the prefix-cache hit share, in absolute points


class Simulate(KvdoctorError):
    """A look found no fresh answer for its window: the request needs the worker and the simulation child (queue=False:
    a simulation of a near window is queued or running already, and its result will be this window's)."""

    def __init__(self, queue: bool = True) -> None:
        super().__init__("no fresh effect for this window")
        self.queue = queue


def spread(target: str, span_s: float) -> float:
    """How much sooner than refresh_s this target's effects expire: fixed per target, in [0, span_s)."""
    return span_s * (zlib.crc32(target.encode()) % 1024) / 1024


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
        # engines sharing the load unevenly run each its share, and uneven arrivals follow their profile: a tenth
        # apart in either is another simulation
        (
            *(config, e, w.kind, max(1, window[-1].engines), cap),
            tuple(round(x, 1) for x in load_shares(window)),
            tuple(round(x, 1) for x in w.profile),
        ),
        w.rate_per_s,
        float(w.population),
        w.prompt.mean,
        w.output.mean,
        w.prefix_hit_ratio,
        q.itl_p50_s,
        q.ttft_p50_s,
    )


_last_steady: tuple[Snap, Snap, int, float, tuple[list[Snap], float, float]] | None = None


def steady(history: list[Snap], window_s: float) -> tuple[list[Snap], float, float]:
    """The engine as it runs now (the history since its last restart) and the stretch (lo, hi) in which its load has
    held lately, at most window_s long; raises WindowError on too little history."""
    global _last_steady
    # a cycle's changes, reliefs and draws all ask of one history (a deque only appends and evicts: its first and
    # last snapshot and its length say it is the same): its stretch is found once
    last = _last_steady
    if (
        last
        and history
        and last[0] is history[0]
        and last[1] is history[-1]
        and last[2:4] == (len(history), window_s)
    ):
        return last[4]
    found = _steady(history, window_s)
    _last_steady = (history[0], history[-1], len(history), window_s, found)
    return found


def _steady(history: list[Snap], window_s: float) -> tuple[list[Snap], float, float]:
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
        self,
        key: Hashable,
        fp: Fingerprint,
        t: float,
        accept: Callable[[V], bool] | None = None,
        sooner_s: float = 0.0,
    ) -> V | None:
        """The latest result younger than refresh_s - sooner_s at t from a window near fp (accepted), or None."""
        max_age = self.refresh_s - sooner_s
        found = [
            v
            for f, v in self._by.get(key, ())
            if t - self._when(v) < max_age and (accept is None or accept(v)) and f.near(fp)
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

    def __init__(self, refresh_s: float, spread_s: float = 0.0) -> None:
        self.refresh_s = refresh_s
        self.spread_s = spread_s  # a target's effects expire up to this much sooner
        self._lock = threading.Lock()
        self._effects: Nearby[_Entry] = Nearby(refresh_s, lambda e: e.effect.t)  # by (fp.same, change)
        self._fps: dict[str, tuple[tuple[float, float], Fingerprint]] = {}  # target → its window's, once
        # (fp.same, change) → the windows whose simulation was queued: (fingerprint, young, the job's key)
        self._flight: dict[Hashable, list[tuple[Fingerprint, bool, Hashable]]] = {}
        self.computed_total = self.shared_total = self.kept_total = self.waited_total = 0

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
        self,
        fp: Fingerprint,
        change: Hashable,
        t: float,
        young: bool,
        mine: Effect | None = None,
        target: str = "",
    ) -> Effect | None:
        """The freshest effect simulated less than refresh_s ago (less the target's `spread`) from a window near fp
        (from a full steady stretch unless this one is young too), or None. Counted as kept when it is `mine` (the
        asker's own), else shared."""
        sooner = spread(target, self.spread_s)
        with self._lock:
            found = self._effects.find((fp.same, change), fp, t, lambda e: young or not e.young, sooner)
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

    def expires(self, target: str, eff: Effect) -> float:
        """When eff is too old for this target: refresh_s after it was simulated, less the target's `spread`."""
        return eff.t + self.refresh_s - spread(target, self.spread_s)

    def waits(
        self,
        fp: Fingerprint,
        change: Hashable,
        young: bool,
        key: Hashable,
        pending: Callable[[Hashable], bool],
    ) -> bool:
        """True when a simulation of a window near fp (from a full steady stretch unless this one is young too) is
        still `pending` (queued or running): its result, shared once it lands, answers this window. Else key's
        simulation is noted as in flight for the windows near fp, and False: the caller queues it."""
        with self._lock:
            live = [job for job in self._flight.get((fp.same, change), ()) if pending(job[2])]
            if any((young or not y) and f.near(fp) for f, y, _ in live):
                self.waited_total += 1
                self._flight[(fp.same, change)] = live
                return True
            self._flight[(fp.same, change)] = [*live, (fp, young, key)]
            if len(self._flight) > 64:  # configurations that moved on: none of theirs still pending
                for k in [k for k, jobs in self._flight.items() if not any(pending(j[2]) for j in jobs)]:
                    del self._flight[k]
            return False

    def forget(self, target: str) -> None:
        """Drop a removed target's cached fingerprint."""
        with self._lock:
            self._fps.pop(target, None)
