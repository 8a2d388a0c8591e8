"""Recordings: JSON lines `{"t": unix_seconds, "text": exposition}` (or `"error"` for a failed scrape), maybe gzip."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from kvdoctor.acyclic import acyclic
from kvdoctor.errors import InputError
from kvdoctor.ingest.parse import ParseError, Parser
from kvdoctor.samples import Scrape


class Frame(NamedTuple):
    """One recorded scrape: its time, and either the exposition text or the error."""

    t: float
    text: str | None
    error: str | None = None


# A recording is one scrape loop's output: its clock only moves forward, by seconds to minutes. A gap of more
# than a day, or a time past year 5000 (milliseconds written as seconds), is a broken clock, not a pause.
MAX_GAP_S = 86_400.0
MAX_T = 1e11


class ParsedFrame(NamedTuple):
    """One recorded scrape with its exposition parsed: what a command that reads a recording twice parses once."""

    t: float
    scrape: Scrape | None
    error: str | None = None


class RecordingError(InputError):
    """A recording that cannot be read; names the file and line."""


def read_recording(path: str | Path) -> Iterator[Frame]:
    """Yield the frames of a recording in file order, refusing (file:line) a clock that steps back or jumps."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
    except OSError as exc:
        raise RecordingError(f"{p}: {exc.strerror or exc}") from None
    opener = gzip.open if gz else open
    prev, prev_line = -math.inf, 0
    with opener(p, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                t = float(obj["t"])
            except (ValueError, KeyError, TypeError) as exc:
                raise RecordingError(f"{p}:{lineno}: not a recording line ({exc})") from None
            _check_clock(p, lineno, t, prev, prev_line)
            prev, prev_line = t, lineno
            text = obj.get("text")
            if isinstance(text, str):
                yield Frame(t, text)
            else:
                yield Frame(t, None, str(obj.get("error") or "no text"))


def _check_clock(p: Path, lineno: int, t: float, prev: float, prev_line: int) -> None:
    # Sorting frames that step back would interleave two runs of one counter: fake resets, rates many times off.
    if not (math.isfinite(t) and 0 <= t <= MAX_T):
        raise RecordingError(f"{p}:{lineno}: time {t:g} is not a unix time in seconds")
    if t < prev:
        raise RecordingError(
            f"{p}:{lineno}: time steps back {prev - t:g} s from line {prev_line} ({prev:.3f} -> {t:.3f}); "
            "a recording's frames must be in time order (two runs appended into one file?)"
        )
    if prev_line and t - prev > MAX_GAP_S:
        raise RecordingError(
            f"{p}:{lineno}: time jumps {t - prev:g} s forward from line {prev_line} ({prev:.3f} -> {t:.3f}), "
            f"more than {MAX_GAP_S:g} s between two scrapes: a broken clock?"
        )


def load_frames(path: str | Path) -> list[Frame]:
    """All frames of a recording in time order; RecordingError (file:line) if its clock steps back or jumps."""
    return list(read_recording(path))


def parse_frames(path: str | Path) -> list[ParsedFrame]:
    """All frames of a recording, each exposition parsed once; RecordingError names the file and the frame."""
    parser = Parser()
    out = []
    with acyclic():  # hundreds of thousands of samples, no cycle among them
        for i, f in enumerate(read_recording(path)):
            if f.text is None:
                out.append(ParsedFrame(f.t, None, f.error))
                continue
            try:
                out.append(ParsedFrame(f.t, parser.parse(f.text)))
            except ParseError as exc:
                raise RecordingError(f"{path}: frame {i + 1}: {exc}") from None
    return out
