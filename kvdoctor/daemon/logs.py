"""Structured logging: text for terminals, JSON lines for log pipelines; secrets redacted either way."""

from __future__ import annotations

import json
import logging
import sys
import time

from kvdoctor.notify.redact import RedactingFilter


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg, and any `extra` fields."""

    _skip = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in record.__dict__.items() if k not in self._skip})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """One record, one line: newlines and other control characters in the message (a label value) shown escaped."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        # a model_name of "x\n2026-… ERROR …" must not forge a second record; a traceback (added after) keeps its lines
        record.message = one_line(record.message)
        return super().formatMessage(record)


def one_line(text: str) -> str:
    """text with its control characters as Python escapes (\\n, \\r, \\x1b), so a log line stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def setup_logging(fmt: str = "text", level: str = "info") -> None:
    """Configure the root logger once for the daemon."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("asyncio").setLevel(logging.WARNING)
