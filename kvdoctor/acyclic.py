"""Work that allocates many objects and no reference cycles, run with the cyclic collector paused."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def acyclic() -> Iterator[None]:
    """Pause automatic cyclic collection for the block (reference counting still frees what it drops)."""
    # Without this, the allocation count alone sets off collections that walk the whole, growing heap again and
    # again for nothing: a tenth of a simulation's time, a sixth of parsing a recording.
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
