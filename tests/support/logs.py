"""What kvdoctor itself logged, apart from other libraries' records caught in the same capture."""

from __future__ import annotations

import logging
from collections.abc import Iterable


def kvdoctor_said(records: Iterable[logging.LogRecord], level: int = logging.NOTSET) -> list[str]:
    """The messages of kvdoctor's loggers ("kvdoctor", "kvdoctor.*") at level or above, in order."""
    # Not asyncio's "Unclosed client session" for an earlier test's garbage, which the collector may find at any
    # allocation of a later test: a count of what kvdoctor says must not depend on it.
    return [
        r.getMessage()
        for r in records
        if (r.name == "kvdoctor" or r.name.startswith("kvdoctor.")) and r.levelno >= level
    ]
