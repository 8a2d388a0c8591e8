"""The cycle clock: one cycle per interval, slots an overlong cycle ate skipped, a warning when cycles come close
to the interval (without one per cycle)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from kvdoctor.status.state import DaemonState

log = logging.getLogger("kvdoctor")
NEAR_INTERVAL = 0.8  # a cycle taking more than this share of the interval is about to fall behind
CLEAR_INTERVAL = 0.5  # and one taking less than this share is safe again
CALM_CYCLES = 10
WARN_EVERY_S = 300.0


class Pace:
    """Runs cycles on the interval and watches their durations against it."""

    def __init__(self, state: DaemonState) -> None:
        self.state = state
        self._warned: float | None = None
        self._calm = 0

    def run(
        self,
        cycle: Callable[[], None],
        interval: Callable[[], float],
        stop: threading.Event,
        wake: threading.Event,
    ) -> None:
        """Call cycle every interval() seconds until stop is set; wake set means the interval changed."""
        next_t = time.monotonic()
        while not stop.is_set():
            started = time.monotonic()
            cycle()
            next_t += interval()
            late = time.monotonic() - next_t
            if late > 0:  # the cycle ate whole slots: skip them rather than run back to back
                missed = math.ceil(late / interval())
                next_t += missed * interval()
                self.state.count_event("missed", missed)
            while not stop.is_set():
                wait = next_t - time.monotonic()
                if wait <= 0:
                    break
                if wake.wait(wait):
                    wake.clear()
                    next_t = started + interval()  # a new interval counts from the last cycle's start

    def note(self, duration: float, interval: float) -> None:
        """Record one cycle's duration."""
        self.state.note_cycle(duration, interval)
        # Warn on entering the danger zone, at most every WARN_EVERY_S, and say it is over only after a run of
        # comfortably short cycles: a daemon hovering around the threshold does not log every cycle.
        now = time.monotonic()
        if duration > NEAR_INTERVAL * interval:
            self._calm = 0
            if self._warned is None or now - self._warned > WARN_EVERY_S:
                self._warned = now
                log.warning(
                    "a cycle took %.2fs of the %gs interval: evaluation is close to falling behind "
                    "(fewer targets per kvdoctor, a longer interval, or --source prometheus)",
                    duration,
                    interval,
                )
        elif self._warned is not None and duration < CLEAR_INTERVAL * interval:
            self._calm += 1
            if self._calm == CALM_CYCLES:
                log.info("the last %d cycles fit the %gs interval again", CALM_CYCLES, interval)
