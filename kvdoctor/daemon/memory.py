"""The daemon's heap: what lives for the whole run kept out of the collector's full passes, and freed memory given
back to the system after a large release (a reload that removed many targets)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger("kvdoctor")
REFREEZE_S = 3600.0  # how long a frozen heap is kept before it is collected and frozen again
GROWN = 1.1  # the store's series count, against the last freeze's, that freezes again


class Heap:
    """Freezes (gc.freeze) what survives the cycles that build the fleet's series, so full collections skip it.

    A fleet's store holds a few Python objects per series (the series, its arrays: ~800,000 tracked objects at
    2,000 targets), and they live as long as their target. Each cycle's scrapes, sessions and diagnoses pass through
    the old generation, and once they add a quarter of its size CPython walks the whole of it: a full collection of
    the fleet every cycle or two, on whichever thread allocated next. Frozen objects are not walked. Freed by
    reference count they go as before; only a reference cycle that dies while frozen waits for the next refreeze
    (every REFREEZE_S, after a collection of everything), so the memory it can hold back is bounded.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._size = -1  # the store's series when the heap was last frozen (-1: not frozen)
        self._at = 0.0

    def settle(self, series: int) -> bool:
        """After a cycle: collect and freeze when the store has grown since the last freeze, or it is old.

        Returns True when it froze the heap now.
        """
        now = self.clock()
        if self._size >= 0 and series <= self._size * GROWN and now - self._at < REFREEZE_S:
            return False
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._size, self._at = series, now
        return True

    def thaw(self) -> None:
        """Hand every frozen object back to the collector (a release, or the daemon stops); the next settle refreezes."""
        gc.unfreeze()
        self._size = -1


def release_memory(heap: Heap | None = None) -> None:
    """Collect garbage (frozen objects too), then ask glibc to return free heap pages (a no-op without malloc_trim)."""
    if heap is not None:
        heap.thaw()
    gc.collect()
    # Series are many small arrays: once freed, glibc keeps their pages for reuse unless told to trim, so RSS
    # would stay at the old fleet's size although the memory is free.
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        log.debug("malloc_trim unavailable", exc_info=True)
