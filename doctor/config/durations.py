"""Durations as every file and flag of kvdoctor spells them: Prometheus' grammar ("1m30s")."""

from __future__ import annotations

import re

_DURATION_RE = re.compile(r"^((\d+)y)?((\d+)w)?((\d+)d)?((\d+)h)?((\d+)m)?((\d+)s)?((\d+)ms)?$")


def parse_duration(text: str) -> float:
    """A Prometheus duration ("1m30s") in seconds; raises ValueError."""
    text = str(text).strip()
    if text == "0":
        return 0.0
    m = _DURATION_RE.match(text)
    if not m or not text:
        raise ValueError(f"not a duration: {text!r}")
    units = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)
    return float(sum(int(m.group(i * 2 + 2) or 0) * u for i, u in enumerate(units)))


def duration_seconds(value: object) -> float:
    """Seconds from a number (or numeric string, as on a command line) or a Prometheus duration; raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    return float(text) if text.replace(".", "", 1).isdigit() else parse_duration(text)
