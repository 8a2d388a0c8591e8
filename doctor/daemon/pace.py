"""Whether cycles fit their interval: a warning when one comes close, without one per cycle."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("kvdoctor")
NEAR_INTERVAL = 0.8  # a cycle taking more than this share of the interval is about to fall behind
CLEAR_INTERVAL = 0.5  # and one taking less than this share is safe again
CALM_CYCLES = 10
WARN_EVERY_S = 300.0


class Pace:
    """Watches cycle durations against the interval and logs when the daemon is about to fall behind."""

    def __init__(self) -> None:
        self._warned: float | None = None
        self._calm = 0

    def note(self, duration: float, interval: float) -> None:
        """Record one cycle's duration."""
        # Warn on entering the danger zone, at most every WARN_EVERY_S, and say it is over only after a run of
        # comfortably short cycles: a daemon hovering around the threshold does not log every cycle.
        now = time.monotonic()
        if duration > NEAR_INTERVAL * interval:
            self._calm = 0
            if self._warned is None or now - self._warned > WARN_EVERY_S:
                self._warned = now
                log.warning("a cycle took %.2fs of the %gs interval: evaluation is close to falling behind "
                            "(fewer targets per kvdoctor, a longer interval, or --source prometheus)", duration, interval)  # fmt: skip
        elif self._warned is not None and duration < CLEAR_INTERVAL * interval:
            self._calm += 1
            if self._calm == CALM_CYCLES:
                log.info("the last %d cycles fit the %gs interval again", CALM_CYCLES, interval)
