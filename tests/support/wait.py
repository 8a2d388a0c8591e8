"""The one way tests wait: poll a condition with a deadline instead of sleeping for a guessed time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    step: float = 0.05,
    what: str = "",
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll predicate() every step seconds until it returns something truthy (returned) or timeout passes.

    `ignore` lists exceptions that mean "not yet" (a server still starting refuses connections); on timeout the
    AssertionError names `what` (or the predicate) and its last value or exception.
    """
    # Event().wait rather than time.sleep: the one pause the suite allows, here, behind a deadline
    pause = threading.Event()
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = value
        except ignore as exc:
            last = exc
        if time.monotonic() >= deadline:
            name = what or getattr(predicate, "__qualname__", repr(predicate))
            raise AssertionError(f"waited {timeout}s for {name}; last: {last!r}")
        pause.wait(step)
