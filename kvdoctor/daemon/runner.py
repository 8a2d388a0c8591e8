"""`kvdoctor serve`: targets scraped on their own schedules, one evaluation per interval on what arrived."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

from kvdoctor.config import Config, ConfigError
from kvdoctor.config.schema import Overrides, default_external_url
from kvdoctor.daemon import persist
from kvdoctor.daemon.assembly import daemon_pipeline, daemon_state
from kvdoctor.daemon.discovery import Discovery
from kvdoctor.daemon.durable import StateWriter, storage_health
from kvdoctor.daemon.health import HealthLog
from kvdoctor.daemon.logs import setup_logging
from kvdoctor.daemon.memory import Heap, release_memory
from kvdoctor.daemon.notifying import build_notifier
from kvdoctor.daemon.pace import Pace
from kvdoctor.daemon.reload import changes, load_everything, load_off_thread, refusal
from kvdoctor.daemon.scrape import Scraper, ScrapeResult
from kvdoctor.daemon.watched import WatchedTargets
from kvdoctor.notify import Notifier
from kvdoctor.pipeline import Cycle
from kvdoctor.report.history import History
from kvdoctor.report.live import report_response
from kvdoctor.rules.loader import RuleGroup
from kvdoctor.sources.daemon import DaemonSource
from kvdoctor.status.exposition import make_registry
from kvdoctor.status.health import NotifyStatus
from kvdoctor.verdicts import Diagnosis
from kvdoctor.web.server import WebServer, health_listener

__all__ = ["Daemon", "load_everything"]
log = logging.getLogger("kvdoctor")


class Daemon:
    """Owns the pipeline, the scraper, the cycle thread and the sinks."""

    def __init__(
        self,
        cfg: Config,
        groups: list[RuleGroup],
        cfg_path: str | None = None,
        overrides: Overrides | None = None,
        on_change: Callable[[Diagnosis, str | None], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg, self.cfg_path, self.overrides = cfg, cfg_path, overrides or Overrides()
        self.state = daemon_state(cfg)
        self.pipeline = daemon_pipeline(cfg, groups)
        self.clock = clock  # wall time of scrapes and evaluations (tests inject one instead of sleeping)
        self.scraper = Scraper(cfg.scrape_max_connections, clock, keep=lambda: self.pipeline.keep)
        self.discovery = Discovery(cfg)
        self.registry = make_registry(self.state)
        self.on_change = on_change  # called with (diagnosis, previous verdict) when it changes
        self.notifier: Notifier | None = None
        self.web: WebServer | None = None
        self.health: WebServer | None = None  # the plain health listener (health_listen), when configured
        self.stop_event = threading.Event()
        self._wake = threading.Event()  # a reload changed the interval: the cycle clock starts over
        self._lock = threading.Lock()
        self.watched = WatchedTargets(self.scraper, self.pipeline, self.state)
        self._last: dict[tuple[str, str], str] = {}
        self._health = HealthLog()
        self._pace = Pace(self.state)
        self.heap = Heap()  # the fleet's long-lived objects frozen out of full collections
        self._thread: threading.Thread | None = None
        self.history = History("kvdoctor serve")  # hourly summaries for `/report`
        self.writer = StateWriter.paced_by(cfg.state_file, clock) if cfg.state_file else None
        self.storage_grace_s = 300.0  # how long writes may fail (wall time) before /-/ready says so
        if self.writer is not None:
            persist.load(self.writer.path, self.pipeline, self.history, clock())
            self.writer.check_at_start()
        self._sync_targets()
        # source `prometheus`: the fleet's Prometheus answers instead of scrapes
        self.source = DaemonSource(self) if cfg.source == "prometheus" else None

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self, web: bool = True) -> None:
        """Start the web server, the sinks, the scrape schedules and the cycle thread (the first cycle once the
        first scrapes are in)."""
        if web:  # first: links in notifications point at the address it is bound to
            self.web = WebServer(
                self.state,
                self.registry,
                listen=self.cfg.listen,
                web_config=self.cfg.web_config,
                reload=self.reload,
                notify_status=self._notify_status,
                rules=lambda: self.pipeline.rules.groups,
                report=lambda part, query: report_response(self.history, query, part),
            )
            self.web.start()
            self.pipeline.runbook_url = self._runbook_page()
        try:
            if web and self.cfg.health_listen:
                self.health = health_listener(self.state, self.registry, self.cfg.health_listen)
                self.health.start()
            self._start_notifier()
        except (ConfigError, OSError):
            for server in filter(None, (self.web, self.health)):
                server.stop()
            raise
        self.state.started_ts = self.clock()
        if self.source is None:
            self.watched.schedule(self.cfg.interval_s)
        self._thread = threading.Thread(target=self._run_cycles, name="kvdoctor-cycle", daemon=True)
        self._thread.start()

    def handle_signals(self) -> None:
        """SIGTERM/SIGINT stop, SIGHUP reloads; call from the main thread before start() so no signal is missed."""
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        signal.signal(signal.SIGINT, lambda *_: self.stop())
        signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=self.reload, daemon=True).start())

    def stop(self) -> None:
        """Ask the daemon to stop (serve_forever then drains)."""
        self.stop_event.set()
        self._wake.set()

    def serve_forever(self) -> int:
        """Block until stopped, then drain."""
        self.stop_event.wait()
        self.shutdown()
        return 0

    def shutdown(self) -> None:
        """Drain: wait for the running cycle, persist, flush notifications, stop serving."""
        log.info("shutting down")
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout=60)
        for part in (self.pipeline, self.scraper, self.discovery):  # what-if workers, scrapes, pod watches
            part.close()
        with self._lock:
            self._persist(force=True)
        if self.notifier is not None:
            self.notifier.flush(10.0)
            self.notifier.close()
        for server in filter(None, (self.web, self.health)):
            server.stop()
        self.heap.thaw()

    # -- cycles --------------------------------------------------------------------------------------
    def _run_cycles(self) -> None:
        if self.source is None:
            self.scraper.wait_first(set(self.watched.specs), self.cfg.interval_s)
        self._pace.run(self._tick_safely, lambda: self.cfg.interval_s, self.stop_event, self._wake)

    def _tick_safely(self) -> None:
        try:
            self.tick()
        except Exception as exc:  # one bad cycle must not end the daemon; its traceback once per cause
            self.state.count_event("error")
            new = self.state.note_cycle_failure(f"{type(exc).__name__}: {exc}")
            log.log(logging.ERROR if new else logging.DEBUG, "cycle failed", exc_info=True)

    def tick(self) -> list[Diagnosis]:
        """One scheduled cycle: ingest the scrapes that arrived since the last one, evaluate, publish."""
        return self._cycle(scrape_now=False)

    def cycle(self) -> list[Diagnosis]:
        """Scrape every target now (each within its own timeout), evaluate the rules, publish the diagnoses."""
        return self._cycle(scrape_now=True)

    def _cycle(self, scrape_now: bool) -> list[Diagnosis]:
        with self._lock, self.heap.building():
            start = time.monotonic()
            if self.source is not None:
                cycle = self.source.cycle(self.clock())
                return self._publish(cycle, start) if cycle is not None else []
            self._sync_targets()
            # scraping now, each target gets its own timeout; the cap to the interval protects the schedule
            specs = list(self.watched.specs.values())
            for r in self.scraper.scrape(specs) if scrape_now else self.scraper.drain():
                self._ingest(r)
            return self._publish(self.pipeline.evaluate(self.clock()), start)

    def _ingest(self, r: ScrapeResult) -> None:
        if r.target not in self.watched.specs:
            return  # removed while its scrape was in flight
        was_up = self.pipeline.targets[r.target].up
        self.pipeline.observe(r.target, r.t, r.scrape, r.error, r.duration_s, r.limit)
        self._health.note(self.pipeline.targets[r.target], was_up, r.cause)
        self.state.set_target(self.pipeline.targets[r.target])

    def _publish(self, cycle: Cycle, start: float) -> list[Diagnosis]:
        took = time.monotonic() - start
        self.state.publish(cycle.diagnoses, cycle.t, took, cycle.evaluation.failed_rules())
        self.state.note_headroom(headroom.stats() if (headroom := self.pipeline.headroom) else {})
        self.state.note_advisor(self.pipeline.advisor)
        failed = self.history.observe(cycle.diagnoses, cycle.t, self.cfg.interval_s)
        self.pipeline.note_steps("history", failed)
        self.state.set_targets(self.pipeline.targets.values())  # with what this cycle found wrong for each
        if self.notifier is not None:
            self.notifier.observe(cycle.diagnoses, cycle.t)
        self._announce(cycle.diagnoses)
        self._persist()
        self._pace.note(time.monotonic() - start, self.cfg.interval_s)
        self.state.note_cycle_failure(None)  # a whole cycle worked: /-/ready counts failures in a row afresh
        self.heap.settle(len(self.pipeline.store))
        return cycle.diagnoses

    def _announce(self, diagnoses: list[Diagnosis]) -> None:
        for d in diagnoses:
            key = (d.target, d.model_name)
            prev = self._last.get(key)
            if prev != d.verdict:
                log.info(
                    "%s · %s: %s (was %s)",
                    d.target,
                    d.model_name or "-",
                    d.verdict,
                    prev or "-",
                    extra={"target": d.target, "model_name": d.model_name, "bottleneck": d.verdict},
                )
                if self.on_change:
                    self.on_change(d, prev)
            self._last[key] = d.verdict

    def _persist(self, force: bool = False) -> None:
        # never raises: a refused write is retried and reported, the cycle goes on
        if self.writer is not None:
            self.writer.save(self.pipeline, self.history, force, self.clock())
        self.state.note_storage(*storage_health(self.writer, self.notifier, self.storage_grace_s))

    # -- targets, reload --------------------------------------------------------------------------------
    def _sync_targets(self) -> None:
        wanted = {t.name: t for t in [*self.cfg.targets, *self.discovery.targets()]}
        removed = self.watched.sync(wanted, self.cfg.interval_s)
        self._health.forget(removed)
        self._last = {k: v for k, v in self._last.items() if k[0] not in removed}
        if len(removed) >= 10:
            release_memory(self.heap)  # freed series are many small allocations: give the pages back

    def reload(self) -> tuple[bool, str]:
        """Re-read config and rules and apply them all, or refuse (keeping everything running) and say why."""
        t = self.clock()
        try:  # read and checked on a thread of its own: cycles go on, SIGTERM does not wait for it
            cfg, groups = load_off_thread(self.cfg_path, self.overrides, self.cfg, self.stop_event)
            discovery = self.discovery.renewed(cfg)  # bad credentials raise ConfigError; watches nothing yet
            if self.web is not None:
                self.web.use_web_config(cfg.web_config)  # raises WebConfigError, nothing applied yet
        except Exception as exc:  # whatever went wrong, the attempt is in the history and reloads_total
            message = refusal(exc)
            self.state.note_reload(False, t, message)
            log.error("reload failed, keeping the running config: %s", message)
            return False, message
        applied = changes(self.cfg, cfg)
        with self._lock:
            notify_changed = (cfg.notify, cfg.external_url) != (self.cfg.notify, self.cfg.external_url)
            interval_changed = cfg.interval_s != self.cfg.interval_s
            log_changed = (cfg.log_format, cfg.log_level) != (self.cfg.log_format, self.cfg.log_level)
            self.cfg = cfg
            self.discovery = discovery.taking_over(self.discovery)
            self.pipeline.set_rules(groups)
            self.pipeline.job = cfg.job
            self.pipeline.idle_after_s = cfg.idle_after_s
            self.scraper.resize(cfg.scrape_max_connections)
            self.pipeline.runbook_url = self._runbook_page()
            self._sync_targets()
        if interval_changed:
            self._wake.set()
        if log_changed:
            setup_logging(cfg.log_format, cfg.log_level)
        if notify_changed:
            if self.notifier is not None:  # open incidents and Slack threads live in its state dir: kept
                self.notifier.flush(5.0)
                self.notifier.close()
                self.notifier = None
            self._start_notifier()
        message = f"reloaded config and {len(groups)} rule groups" + (
            f": {'; '.join(applied)}" if applied else ""
        )
        self.state.note_reload(True, t, message=message)
        log.info("%s", message)
        return True, message

    def _bound(self) -> tuple[str | None, bool]:
        return (self.web.bound, self.web.tls) if self.web is not None else (None, False)

    def _runbook_page(self) -> str:
        """Where findings link to: the configured runbook or external URL, else the address the server is bound to."""
        return self.cfg.runbook_page(*self._bound())

    def _external_url(self) -> str:
        """The URL users reach this daemon at: external_url, else from the bound (or configured) listen address."""
        bound, tls = self._bound()
        return (self.cfg.external_url or default_external_url(bound or self.cfg.listen, tls)).rstrip("/")

    def _notify_status(self) -> NotifyStatus | None:
        # the web server starts before the notifier (its address is in the links), so there may be none yet
        return self.notifier.status() if self.notifier is not None else None

    def _start_notifier(self) -> None:
        self.notifier = build_notifier(self.cfg, self._external_url(), self.pipeline.targets)
