"""The daemon's heap: what lives for the whole run kept out of the collector's full passes, and freed memory given
back to the system after a large release (a reload that removed many targets)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import Callable, Iterator

from kvdoctor.acyclic import acyclic

log = logging.getLogger("kvdoctor")
REFREEZE_S = 3600.0  # how long a frozen heap is kept before it is collected and frozen again
GROWN = 1.1  # the store's series count, against the last freeze's, that freezes again
# Container allocations between young collections (CPython's default is 700). A cycle allocates some 400 a target,
# most freed by reference count soon after; each young collection moves the survivors of the moment up, and the
# older generations' collections that followed cost twice the young ones (300 targets: 15 middle and one full
# collection a cycle at 700, none at 10,000; the young ones' CPU the same).
YOUNG_THRESHOLD = 10_000
_THRESHOLD = gc.get_threshold()  # the interpreter's, put back when the heap is thawed


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
        gc.set_threshold(max(_THRESHOLD[0], YOUNG_THRESHOLD), *_THRESHOLD[1:])
        self._size, self._at = series, now
        return True

    @contextlib.contextmanager
    def building(self) -> Iterator[None]:
        """Around a cycle: while nothing is frozen (the first cycle, or after a thaw) no automatic collection runs."""
        # a first cycle at 2,000 targets grows the heap from nothing to millions of objects, and each quarter it
        # grows sets off a full collection of all of it (seconds); settle() collects once at the cycle's end instead
        if self._size >= 0:
            yield
            return
        with acyclic():
            yield

    def thaw(self) -> None:
        """Hand every frozen object back to the collector (a release, or the daemon stops); the next settle refreezes."""
        gc.unfreeze()
        gc.set_threshold(*_THRESHOLD)
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
