"""The advisor's predicted effects by (target, change), and when each is looked at again.

An effect is looked at again every RETRY_S, or once the too-short steady stretch it was asked on has grown long
enough; a key tried with no effect (too little traffic) is retried RETRY_S later. Not locked: the advisor holds its
own lock around every call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import NamedTuple

from kvdoctor.verdicts import Effect

RETRY_S = 30.0  # a prediction's window is looked at again this soon (too little traffic: tried again)


class Key(NamedTuple):
    """What an effect is predicted for: a target, a change (its knobs, sorted) and the simulation draw (seed); or
    a target's check after a restart."""

    target: str
    change: tuple[tuple[str, float | str], ...]
    # draw 0 is the advice's own prediction (shared with the relief check); a further draw, cached apart, is
    # asked only by the relief check (whatif/relief.py) and is never shown
    draw: int = 0
    # set: not an effect but the check after a restart that began then (followup.py), computed in the same worker
    followup_of: float | None = None

    def shared_by(self) -> tuple[tuple[tuple[str, float | str], ...], int]:
        """The change at its draw: what near windows' simulations are shared by."""
        return self.change, self.draw


class EffectCache:
    """Effects by key (None: tried, none yet), each with when it was asked and when it is looked at again."""

    def __init__(self) -> None:
        self._effects: dict[Key, Effect | None] = {}
        self._asked: dict[Key, float] = {}
        self._ready: dict[Key, float] = {}  # when a window found too short will have held long enough
        self._due: dict[Key, float] = {}  # when a key's effect is looked at again

    def get(self, key: Key) -> Effect | None:
        """The key's effect, None when none is kept."""
        return self._effects.get(key)

    def look(self, key: Key, t: float) -> bool:
        """Whether key's effect is looked at now (noted as asked at t when it is): never asked, or due and its
        window long enough, or tried without an effect and due for a retry."""
        eff = self._effects.get(key)
        # looked at every RETRY_S (its fingerprint); simulated when that moved, a short stretch grew or refresh_s ended
        stale = key not in self._effects or (
            eff is not None and t >= self._due.get(key, eff.t + RETRY_S) and t >= self._ready.get(key, t)
        )
        # retried RETRY_S later, or once a too-short steady stretch has grown long enough
        due = self._ready.get(key, self._asked.get(key, t) + RETRY_S)
        retry = key in self._effects and eff is None and t >= due
        if stale or retry:
            self._asked[key] = t
        return stale or retry

    def ask(self, key: Key, t: float, every_s: float) -> bool:
        """True, noting key as asked at t, unless it was asked less than every_s before t."""
        if t - self._asked.get(key, -math.inf) < every_s:
            return False
        self._asked[key] = t
        return True

    def put(
        self,
        key: Key,
        eff: Effect | None,
        t: float,
        ready: float | None,
        since: float | None,
        expires: Callable[[Effect], float],
    ) -> Effect | None:
        """Keep what a look at t found and return what stands: ready is when a window found too short will be long
        enough (None: it was not), since when the target's borderline limit has held, expires when an effect is too old."""
        prev = self._effects.get(key)
        held = ready is not None and prev is not None and since is not None and since <= prev.t
        if eff is None and held:
            eff = prev  # the limit it judged still holds (a queue draining): it stands until a steady stretch
        self._effects[key] = eff
        if eff is not None:  # looked at again RETRY_S from now, and simulated again when refresh_s is up
            self._due[key] = min(t + RETRY_S, expires(eff))
        if ready is None:
            self._ready.pop(key, None)
        else:
            self._ready[key] = ready
        return eff

    def fail(self, key: Key) -> None:
        """The key's look raised: no effect, retried as one tried without."""
        self._effects[key] = None

    def forget(self, target: str) -> None:
        """Drop every key of a removed target."""
        for k in [k for k in {*self._effects, *self._asked} if k.target == target]:
            for d in (self._effects, self._asked, self._ready, self._due):
                d.pop(k, None)

    def __iter__(self) -> Iterator[Key]:
        return iter(self._effects)

    def __len__(self) -> int:
        return len(self._effects)
