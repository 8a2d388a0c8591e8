"""Recordings: JSON lines `{"t": unix_seconds, "text": exposition}` (or `"error"` for a failed scrape), maybe gzip."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from kvdoctor.errors import InputError


class Frame(NamedTuple):
    """One recorded scrape: its time, and either the exposition text or the error."""

    t: float
    text: str | None
    error: str | None = None


class RecordingError(InputError):
    """A recording that cannot be read; names the file and line."""


def read_recording(path: str | Path) -> Iterator[Frame]:
    """Yield the frames of a recording in file order."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
    except OSError as exc:
        raise RecordingError(f"{p}: {exc.strerror or exc}") from None
    opener = gzip.open if gz else open
    with opener(p, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                t = float(obj["t"])
            except (ValueError, KeyError, TypeError) as exc:
                raise RecordingError(f"{p}:{lineno}: not a recording line ({exc})") from None
            text = obj.get("text")
            if isinstance(text, str):
                yield Frame(t, text)
            else:
                yield Frame(t, None, str(obj.get("error") or "no text"))


def load_frames(path: str | Path) -> list[Frame]:
    """All frames of a recording, sorted by time."""
    return sorted(read_recording(path), key=lambda f: f.t)
