"""The health of kvdoctor's own machinery as the daemon reports it: its files, its outbox, its reloads, its sinks.

Values, not dicts: the daemon and the notify sinks make them, the status page, /api and /metrics read them, and
`to_json()` is what /api/v1/status shows (the same keys as before these were typed).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class OutboxStats:
    """Notifications per state in the outbox, its last delivery error and the health of its file."""

    pending: int
    done: int
    dead: int
    quarantined: int
    last_error: str  # the last delivery error, redacted
    unsaved: int  # items held in memory while the disk refuses writes
    write_failures_total: int
    quarantined_total: int
    write_error: str  # why the file cannot be written ("" while it can)
    failing_since: float | None

    def to_json(self) -> dict[str, object]:
        """JSON-ready, for /api and `notify status`."""
        return asdict(self)


@dataclass(frozen=True)
class FileHealth:
    """One file kvdoctor writes (its state, the outbox): where, how many writes failed and since when."""

    path: str
    write_failures_total: int
    failing_since: float | None
    error: str
    unsaved: int | None = None  # the outbox's only: items waiting for the disk
    quarantined_total: int | None = None  # the outbox's only: items put aside as unreadable

    def to_json(self) -> dict[str, object]:
        """JSON-ready; the outbox-only figures are left out for a file that has none."""
        return {k: v for k, v in asdict(self).items() if v is not None or k == "failing_since"}


@dataclass(frozen=True)
class ReloadAttempt:
    """One config/rules reload attempt: when, whether it applied, and what it said."""

    ts: float
    ok: bool
    message: str

    def to_json(self) -> dict[str, object]:
        """JSON-ready, for /api/v1/status."""
        return asdict(self)


@dataclass(frozen=True)
class NotifyStatus:
    """The notify sinks as /api shows them: which are on, the outbox, the open incidents."""

    slack: str  # the Slack mode, or "off"
    alertmanager: tuple[str, ...]  # redacted URLs
    outbox: OutboxStats
    open_incidents: tuple[str, ...]
    alertmanager_last_error: str

    def to_json(self) -> dict[str, object]:
        """JSON-ready, for /api/v1/status's `notify`."""
        return {
            "slack": self.slack,
            "alertmanager": list(self.alertmanager),
            "outbox": self.outbox.to_json(),
            "open_incidents": list(self.open_incidents),
            "alertmanager_last_error": self.alertmanager_last_error,
        }
