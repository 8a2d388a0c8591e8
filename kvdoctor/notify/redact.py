"""Keep Slack tokens and webhook URLs out of logs, exceptions and API output."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

_PATTERNS = (
    (re.compile(r"xox[abprse]-[A-Za-z0-9-]+"), "xox?-REDACTED"),
    (re.compile(r"xapp-[A-Za-z0-9-]+"), "xapp-REDACTED"),
    (re.compile(r"/services/[A-Za-z0-9_]+/[A-Za-z0-9_]+/[A-Za-z0-9_]+"), "/services/T000/B000/REDACTED"),
    (re.compile(r"(?i)(bearer\s+)[^\s'\",}]+"), r"\1REDACTED"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"), r"\1REDACTED@"),
)

_known: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret so that every later redact() call removes it verbatim."""
    if value and len(value) >= 8:
        _known.add(value)


def redact(text: object, secrets: Iterable[str] = ()) -> str:
    """Return str(text) with known secrets, Slack tokens, webhook paths and bearer values masked."""
    s = str(text)
    for secret in sorted({*_known, *(x for x in secrets if x)}, key=len, reverse=True):
        s = s.replace(secret, "REDACTED")
    for pattern, repl in _PATTERNS:
        s = pattern.sub(repl, s)
    return s


def describe_error(exc: BaseException) -> str:
    """A one-line, redacted description of an exception, safe for logs and status output."""
    return redact(f"{type(exc).__name__}: {exc}")[:500]


class RedactingFilter(logging.Filter):
    """A logging filter that redacts the formatted message (and drops args) of every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record in place; never drops it."""
        try:
            msg = record.getMessage()
        except Exception:
            msg = str(record.msg)
        record.msg = redact(msg)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.msg += " | " + describe_error(record.exc_info[1])
            record.exc_info = None
            record.exc_text = None
        return True


def redacting_logger(name: str) -> logging.Logger:
    """A logger whose records are always redacted (used for slack-sdk's own logging too)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())
    return logger
