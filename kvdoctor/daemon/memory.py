"""Give freed memory back to the system after a large release (a reload that removed many targets)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

log = logging.getLogger("kvdoctor")


def release_memory() -> None:
    """Collect garbage, then ask glibc to return free heap pages (a no-op where there is no malloc_trim)."""
    gc.collect()
    # Series are many small arrays: once freed, glibc keeps their pages for reuse unless told to trim, so RSS
    # would stay at the old fleet's size although the memory is free.
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        log.debug("malloc_trim unavailable", exc_info=True)
