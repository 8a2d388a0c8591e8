"""Durations as every file and flag of kvdoctor spells them: Prometheus' grammar, decimals allowed.

`1m30s`, `1h30m`, `500ms`, `1.5s`, `2d`; units y w d h m s ms in that order; a bare number is seconds. Rule files
use the same parser, so kvdoctor accepts `for: 1.5m` where promtool would not; `format_duration` writes the
Prometheus form back (`1500ms`) wherever kvdoctor emits a rule file.
"""

from __future__ import annotations

import re

UNITS = (
    ("y", 365 * 86400.0),
    ("w", 7 * 86400.0),
    ("d", 86400.0),
    ("h", 3600.0),
    ("m", 60.0),
    ("s", 1.0),
    ("ms", 0.001),
)
_NUMBER = r"(\d+(?:\.\d+)?)"
_DURATION_RE = re.compile("^" + "".join(f"(?:{_NUMBER}{unit})?" for unit, _ in UNITS) + "$")
_PLAIN_RE = re.compile(r"^\d+(?:\.\d+)?$")
EXAMPLES = "like 15s, 1m30s, 500ms or 1.5s"


def parse_duration(text: str) -> float:
    """Seconds from a duration ("1m30s", "1.5s", "500ms") or a bare number of seconds; raises ValueError."""
    text = str(text).strip()
    if _PLAIN_RE.match(text):
        return float(text)
    m = _DURATION_RE.match(text)
    if not text or not m:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(g) * factor for g, (_, factor) in zip(m.groups(), UNITS, strict=True) if g)


def duration_seconds(value: object) -> float:
    """Seconds from a number (as YAML gives it) or a duration string; raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    return parse_duration(str(value))


def format_duration(seconds: float) -> str:
    """The Prometheus spelling of a duration: 90 -> 1m30s, 1.5 -> 1s500ms, 0 -> 0s."""
    ms = round(seconds * 1000)
    if ms == 0:
        return "0s"
    out = []
    for unit, factor in UNITS:
        n, ms = divmod(ms, round(factor * 1000))
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)
