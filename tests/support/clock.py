"""A clock tests advance by hand, injected into the daemon and replay servers instead of sleeping."""

from __future__ import annotations

import threading


class ManualClock:
    """Returns the time it was set to; advance() moves it (thread-safe: servers read it from their threads)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        with self._lock:
            self._now += seconds


class SteppedClock(ManualClock):
    """A ManualClock whose wait() advances it at once: the CLI's sampling clock (`kvdoctor.cli.common.CLOCK`)."""

    def time(self) -> float:
        """The clock's time, as `time.time` reads."""
        return self()

    def wait(self, seconds: float) -> None:
        """Move the clock forward instead of waiting."""
        self.advance(seconds)
