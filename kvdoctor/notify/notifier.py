"""The facade the daemon and `kvdoctor replay --notify` call once per evaluation cycle."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from kvdoctor.notify.alertmanager import AlertmanagerSink
from kvdoctor.notify.alerts import Event
from kvdoctor.notify.blocks import Links
from kvdoctor.notify.config import NotifyConfig
from kvdoctor.notify.lifecycle import Lifecycle
from kvdoctor.notify.outbox import Outbox
from kvdoctor.notify.redact import redact, redacting_logger
from kvdoctor.notify.slack import SlackSink
from kvdoctor.notify.worker import Sink, Worker
from kvdoctor.status.health import NotifyStatus
from kvdoctor.verdicts import Diagnosis

log = redacting_logger("kvdoctor.notify")


class Notifier:
    """Lifecycle + durable outbox + delivery worker + Alertmanager pusher, restart-safe via state_dir."""

    def __init__(
        self,
        config: NotifyConfig,
        state_dir: str | Path,
        clock: Callable[[], float] = time.time,
        *,
        start: bool = True,
        slack_retry_backoff: float = 0.5,
    ) -> None:
        self.config, self.clock = config, clock
        path = Path(config.outbox_path) if config.outbox_path else Path(state_dir) / "notify.sqlite"
        self.outbox = Outbox(path)
        try:
            self.lifecycle = Lifecycle.from_state(config, self.outbox.load_state())
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # JSON, but not a lifecycle's shape
            self.outbox.start_over(f"its lifecycle state does not load ({type(exc).__name__}: {exc})")
            self.lifecycle = Lifecycle(config)
        self._lock = threading.Lock()
        self._saved_sig: tuple[object, ...] = ()
        self._saved_at = float("-inf")
        self._pruned_at = 0.0
        links = Links(config.status_page_url, config.grafana_url)
        self.slack = (
            SlackSink(config.slack, links, retry_backoff=slack_retry_backoff) if config.slack.mode else None
        )
        sinks: dict[str, Sink] = {self.slack.name: self.slack} if self.slack else {}
        self.worker = Worker(self.outbox, sinks, initial=config.retry_initial, cap=config.retry_max)
        self.alertmanager = AlertmanagerSink(config.alertmanager) if config.alertmanager.urls else None
        # Seconds added to every time pushed to Alertmanager; None (replay): fixed at the first push so that the
        # first alert starts "now" on the wall clock and later times keep their distance from it.
        self.alertmanager_offset: float | None = 0.0
        if start:
            self.worker.start()

    def observe(self, diagnoses: list[Diagnosis], now: float | None = None) -> list[Event]:
        """Feed one cycle's diagnoses; enqueue owed notifications durably and push alerts. Never blocks on I/O."""
        if not self.config.enabled:
            return []
        t = self.clock() if now is None else now
        with self._lock:
            events = self.lifecycle.observe(diagnoses, t)
            items = []
            for ev in events:
                if self.slack and self.slack.wants(ev):
                    items.append(
                        (f"{self.slack.name}:{ev.key}", ev.incident, self.slack.name, self.slack.payload(ev))
                    )
            # State and owed messages are committed together: after a crash, neither is ahead of the other.
            # Between transitions only last_seen/evidence move, so those are saved at most every 30 s.
            sig = self._signature()
            if items or sig != self._saved_sig or t - self._saved_at >= 30 or t < self._saved_at:
                self.outbox.commit(items, self.lifecycle.to_state())
                self._saved_sig, self._saved_at = sig, t
            else:
                self.outbox.retry_writes()  # what a full disk refused catches up as soon as it takes it
            alerts = self.lifecycle.active_alerts()
        if items:
            self.worker.wake()
        if time.time() - self._pruned_at >= 3600:  # delivered rows are kept a week, for status and debugging
            self._pruned_at = time.time()
            self.outbox.prune(self._pruned_at - 7 * 86400)
        if self.alertmanager and alerts:
            if self.alertmanager_offset is None:
                self.alertmanager_offset = time.time() - t
            self.alertmanager.submit(alerts, t, self.alertmanager_offset)
        for ev in events:
            log.info("notification %s %s (%d alerts)", ev.kind, ev.key, len(ev.alerts))
        return events

    def _signature(self) -> tuple[object, ...]:
        lc = self.lifecycle
        alerts = tuple((a.key, a.status, a.announced, a.silenced, a.severity) for a in lc.alerts.values())
        return alerts, tuple((g.key, g.seq) for g in lc.groups.values()), len(lc.recently_resolved)

    def send_test_message(self) -> list[tuple[bool, str]]:
        """Send a test message to every configured sink; (ok, redacted result line) per sink."""
        out = []
        if self.slack:
            out.append(self.slack.send_test())
        if self.alertmanager:
            out += self.alertmanager.send_test(self.clock())
        return out

    def status(self) -> NotifyStatus:
        """Redacted delivery status for /api: sinks, outbox counts, open incidents."""
        return NotifyStatus(
            slack=self.config.slack.mode or "off",
            alertmanager=tuple(redact(u) for u in self.config.alertmanager.urls),
            outbox=self.outbox.stats(),
            open_incidents=tuple(sorted(g.incident for g in self.lifecycle.groups.values())),
            alertmanager_last_error=self.alertmanager.last_error if self.alertmanager else "",
        )

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything owed is delivered (or timeout); True when nothing is pending."""
        deadline = time.monotonic() + timeout
        ok = self.worker.flush(timeout) if self.slack else True
        if self.alertmanager:
            ok = self.alertmanager.flush(max(0.0, deadline - time.monotonic())) and ok
        return ok

    def close(self) -> None:
        """Stop the worker threads and close the outbox; owed items stay on disk for the next start."""
        self.worker.close()
        if self.alertmanager:
            self.alertmanager.close()
        self.outbox.close()
