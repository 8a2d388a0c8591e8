"""One scrape's samples from a live /metrics URL or the last scrape of a recording."""

from __future__ import annotations

from pathlib import Path

from kvdoctor.config.targets import metrics_url
from kvdoctor.errors import InputError, TransportError
from kvdoctor.ingest.fetch import HttpOptions, ScrapeError, fetch
from kvdoctor.ingest.parse import ParseError, parse
from kvdoctor.ingest.recording import RecordingError, read_recording
from kvdoctor.samples import Sample

TIMEOUT_S = 10.0


class LiveCapacityError(TransportError):
    """The live /metrics URL could not be scraped; the message says why."""


class CapacityInputError(InputError):
    """A recording or exposition the capacity figures cannot be read from; the message says which."""


def fetch_text(url: str, timeout: float = TIMEOUT_S) -> str:
    """The exposition text of one scrape of `url`."""
    try:
        return fetch(metrics_url(url), HttpOptions(read_timeout=timeout, total_timeout=timeout))
    except ScrapeError as e:
        raise LiveCapacityError(f"cannot scrape: {e}") from e


def recording_text(path: str | Path) -> str:
    """The text of the last successful scrape in a recording (JSON lines {"t", "text"}, gzipped or not)."""
    last = None
    try:
        for frame in read_recording(path):
            last = frame.text if frame.text is not None else last
    except (RecordingError, OSError, EOFError) as e:
        raise CapacityInputError(f"cannot read recording: {e}") from e
    if last is None:
        raise CapacityInputError(f"{path}: recording holds no successful scrape")
    return last


def samples_from_text(text: str) -> list[Sample]:
    """Samples of one exposition text."""
    try:
        return parse(text).samples
    except ParseError as e:
        raise CapacityInputError(f"cannot parse the exposition: {e}") from e
