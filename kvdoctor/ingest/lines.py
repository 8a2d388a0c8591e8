"""The parts of one exposition line: label sets, values, timestamps and exemplars, and the error naming a bad line."""

from __future__ import annotations

import math
import re

from kvdoctor.errors import InputError
from kvdoctor.samples import Labels

_LABELS_OK_RE = re.compile(
    r'(?:\s*[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(?:[^"\\]|\\.)*"\s*,)*\s*'
    r'(?:[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(?:[^"\\]|\\.)*"\s*)?\Z',
    re.S,
)
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"', re.S)
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE_RE = re.compile(r"\\[\\\"n]")
# The label set of a line that holds a `#` (an exemplar, or one in a label value): quoted values skipped whole.
_LABELSET_RE = re.compile(r'\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\}', re.S)
_EXEMPLAR_RE = re.compile(r'\s*\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\}\s*(\S+)(?:\s+(\S+))?\s*\Z', re.S)


class ParseError(InputError):
    """An exposition line that is not valid text format; names the line."""

    def __init__(self, lineno: int, line: str, reason: str) -> None:
        shown = line if len(line) <= 120 else line[:117] + "..."
        super().__init__(f"line {lineno}: {reason}: {shown!r}")
        self.lineno = lineno
        # What went wrong without the line's values or position, which change from scrape to scrape:
        # a warning is said again when this changes, not when a counter in the bad line moves.
        name = re.match(r"\s*([^\s{]*)", line)
        self.cause = f"{reason.split(' (', 1)[0]} in {name.group(1) if name else ''}".rstrip()


def _unescape(value: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], value)


def to_float(text: str) -> float:
    """A sample value as Go's ParseFloat reads it; ValueError otherwise."""
    # Go's ParseFloat accepts these spellings; Python's float() also takes "infinity" and underscores, which we refuse.
    if "_" in text:
        raise ValueError(text)
    return float(text)


def timestamp_ms(text: str, seconds: bool, lineno: int, line: str) -> int:
    """A sample timestamp in ms (OpenMetrics' are seconds); ParseError for a non-finite one."""
    ts = to_float(text)
    if not math.isfinite(ts):
        raise ParseError(lineno, line, f"timestamp {text} is not a finite number")
    return round(ts * 1000) if seconds else int(ts)


def without_exemplar(line: str, brace: int, lineno: int) -> tuple[str, int]:
    """A line holding a `#` without its exemplar (checked, then dropped), and where its label set opens (or -1)."""
    if brace > line.find("#"):
        brace = -1  # the `{` is the exemplar's: a label set's comes before any `#`
    close = -1
    if brace != -1:
        m = _LABELSET_RE.match(line, brace)
        if m is None:
            raise ParseError(lineno, line, "unclosed label set")
        close = m.end() - 1
    head, hashed, exemplar = line[close + 1 :].partition("#")
    if hashed:
        m = _EXEMPLAR_RE.match(exemplar)
        if m is None or not _LABELS_OK_RE.match(m.group(1)):
            raise ParseError(lineno, line, "invalid exemplar")
        try:
            to_float(m.group(2))
            if m.group(3) is not None:
                timestamp_ms(m.group(3), True, lineno, line)
        except ValueError:
            raise ParseError(lineno, line, "invalid exemplar value or timestamp") from None
    # What is left has no `}` after the label set, so the caller's rfind finds the set's own.
    return line[: close + 1] + head, brace


def parse_labels(inner: str, lineno: int, line: str) -> Labels:
    """The label pairs between a line's braces, unescaped; ParseError for a bad set or a repeated name."""
    if not _LABELS_OK_RE.match(inner):
        raise ParseError(lineno, line, "invalid label set")
    pairs = _LABEL_RE.findall(inner)
    if "\\" in inner:
        pairs = [(k, _unescape(v)) for k, v in pairs]
    if len({k for k, _ in pairs}) != len(pairs):
        raise ParseError(lineno, line, "duplicate label name")
    return tuple(pairs)
