"""The state file's writes: a disk that refuses one is retried with backoff and reported, never fails the cycle."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kvdoctor.daemon import persist
from kvdoctor.notify import Notifier
from kvdoctor.pipeline import Pipeline
from kvdoctor.report.history import History
from kvdoctor.status.health import FileHealth

log = logging.getLogger("kvdoctor")
BACKOFF_INITIAL_S, BACKOFF_MAX_S = 1.0, 60.0
# the step ledger's part is serialized again at most this often (and at shutdown): a fleet's is megabytes (1,000
# full targets: 16 MB, 0.5 s of CPU), and a crash losing 5 minutes of a day of step costs loses little
LEDGER_EVERY_S = 300.0


def writable(directory: Path) -> str:
    """'' if a file can be created in directory, else what the disk said (full, read-only, missing…)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".kvdoctor-probe", suffix=".tmp")
        try:
            os.write(fd, b"x" * 4096)  # a full disk still creates empty files; it refuses their blocks
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


class StateWriter:
    """Saves the state each cycle while the disk takes it; while it does not, retries with a capped backoff."""

    def __init__(self, path: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path, self.monotonic = Path(path), monotonic
        self.failures_total = 0
        self.failing_since: float | None = None  # wall time of the first failed write of the current outage
        self.last_error = ""
        self._failures = 0
        self._retry_at = 0.0
        self._ledger: tuple[float, str | None] | None = None  # when the ledger's JSON was made, and the JSON

    @classmethod
    def paced_by(cls, path: str, clock: Callable[[], float]) -> StateWriter:
        """A writer whose retries follow the daemon's clock: the monotonic one in service, a test's when injected."""
        return cls(path, time.monotonic if clock is time.time else clock)

    def check_at_start(self) -> None:
        """Say at start-up, naming the directory, when the state cannot be written (kvdoctor starts anyway)."""
        why = writable(self.path.parent)
        if why:
            log.warning(
                "state directory %s is not writable (%s): starting without persistence; state and "
                "notifications are kept in memory and written once the disk takes them",
                self.path.parent,
                why,
            )

    def save(
        self, pipeline: Pipeline, history: History | None, force: bool = False, now: float | None = None
    ) -> bool:
        """Write the state if the disk is due a try (force: now, at shutdown); never raises. True when written."""
        if not force and self.monotonic() < self._retry_at:
            return False
        t = time.time() if now is None else now
        try:
            if force or self._ledger is None or not 0 <= t - self._ledger[0] < LEDGER_EVERY_S:
                self._ledger = (t, persist.ledger_json(pipeline, t))
            persist.save(self.path, pipeline, history, t, self._ledger[1])
        except Exception as exc:  # OSError from the disk, or a value the file cannot hold: the cycle goes on
            self._failed(f"{type(exc).__name__}: {exc}")
            return False
        if self.failing_since is not None:
            log.warning("state file %s written again after %d failed writes", self.path, self._failures)
        self._failures, self.failing_since, self._retry_at, self.last_error = 0, None, 0.0, ""
        return True

    def _failed(self, error: str) -> None:
        self.failures_total += 1
        self._failures += 1
        self.failing_since = self.failing_since or time.time()
        delay = min(BACKOFF_MAX_S, BACKOFF_INITIAL_S * 2 ** (self._failures - 1))
        self._retry_at = self.monotonic() + delay
        if error != self.last_error:  # once per cause, not every cycle of an outage
            log.error(
                "cannot write state file %s: %s; the daemon goes on, retrying with backoff", self.path, error
            )
        self.last_error = error

    def status(self) -> FileHealth:
        """What the status page and /-/ready show of it."""
        return FileHealth(str(self.path), self.failures_total, self.failing_since, self.last_error)


def storage_health(
    writer: StateWriter | None, notifier: Notifier | None, grace_s: float
) -> tuple[dict[str, FileHealth], str]:
    """The health of each file kvdoctor writes, and why /-/ready should fail ('' while every outage is shorter
    than grace_s: a disk that is full for a moment does not take the daemon out of its service)."""
    files: dict[str, FileHealth] = {}
    if writer is not None:
        files["state"] = writer.status()
    if notifier is not None:
        s = notifier.outbox.stats()
        files["outbox"] = FileHealth(
            path=str(notifier.outbox.path),
            write_failures_total=s.write_failures_total,
            failing_since=s.failing_since,
            error=s.write_error,
            unsaved=s.unsaved,
            quarantined_total=s.quarantined_total,
        )
    now = time.time()
    for name, f in files.items():
        if f.failing_since is not None and now - f.failing_since >= grace_s:
            return (
                files,
                f"{name} file {f.path} cannot be written for {now - f.failing_since:.0f} s: {f.error}",
            )
    return files, ""
