"""`kvdoctor serve`: APScheduler drives scrape + evaluate cycles; sinks read the shared state."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobEvent
from apscheduler.schedulers.background import BackgroundScheduler

from doctor.config import Config, ConfigError, TargetSpec, load_config
from doctor.config.schema import default_external_url
from doctor.daemon import persist
from doctor.daemon.discovery import FileDiscovery
from doctor.daemon.scrape import Scraper
from doctor.notify import Notifier, parse_notify_config
from doctor.notify.located import located_errors
from doctor.pipeline import Cycle, Pipeline
from doctor.rules.loader import RuleGroup, RuleLoadError, load_files, rule_files
from doctor.sources.daemon import DaemonSource
from doctor.status.exposition import make_registry
from doctor.status.state import DaemonState
from doctor.targets import target_facts
from doctor.verdicts import Diagnosis
from doctor.web.server import WebServer

log = logging.getLogger("kvdoctor")
EVENTS = {EVENT_JOB_ERROR: "error", EVENT_JOB_MISSED: "missed", EVENT_JOB_MAX_INSTANCES: "max_instances"}


def load_everything(cfg_path: str | None, overrides: dict[str, Any]) -> tuple[Config, list[RuleGroup]]:
    """Config (with CLI overrides) and rules; raises ConfigError/RuleLoadError listing every problem."""
    cfg = load_config(cfg_path)
    for key, value in overrides.items():
        if value is not None:
            setattr(cfg, key, value)
    return cfg, load_files(rule_files(cfg.rules))


class Daemon:
    """Owns the pipeline, the scraper, the scheduler and the sinks."""

    def __init__(self, cfg: Config, groups: list[RuleGroup], cfg_path: str | None = None,
                 overrides: dict[str, Any] | None = None, on_change: Any = None) -> None:  # fmt: skip
        self.cfg, self.cfg_path, self.overrides = cfg, cfg_path, overrides or {}
        self.state = DaemonState()
        self.pipeline = Pipeline(groups, retention_s=cfg.retention_s, job=cfg.job)
        self.pipeline.runbook_url = cfg.runbook_page()
        self.scraper = Scraper(cfg.scrape_workers)
        self.discovery = FileDiscovery(cfg.file_sd)
        self.registry = make_registry(self.state)
        self.on_change = on_change  # called with (diagnosis, previous verdict) when it changes
        self.notifier: Notifier | None = None
        self.web: WebServer | None = None
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._specs: dict[str, TargetSpec] = {}
        self._last: dict[tuple[str, str], str] = {}
        self.scheduler = BackgroundScheduler(
            timezone=UTC,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": int(cfg.interval_s)},
        )
        self.scheduler.add_listener(self._event, EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
        if cfg.state_file:
            persist.load(cfg.state_file, self.pipeline)
        self._sync_targets()
        self.source: DaemonSource | None = (
            None  # source `prometheus`: the fleet's Prometheus answers instead of scrapes
        )
        if cfg.source == "prometheus":
            self.source = DaemonSource(self)

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self, web: bool = True) -> None:
        """Start the sinks and the cycle job (first cycle at once)."""
        if web:  # first: links in notifications point at the address it is bound to
            self.web = WebServer(self.state, self.registry, listen=self.cfg.listen, web_config=self.cfg.web_config,
                                 reload=self.reload, extra_status=self._notify_status,
                                 rules=lambda: self.pipeline.rules.groups)  # fmt: skip
            self.web.start()
            self.pipeline.runbook_url = self._runbook_page()
        try:
            self._start_notifier()
        except ConfigError:
            if self.web is not None:
                self.web.stop()
            raise
        self.scheduler.add_job(self.cycle, "interval", seconds=self.cfg.interval_s, id="cycle",
                               next_run_time=datetime.now(UTC))  # fmt: skip
        self.scheduler.start()
        self.state.started_ts = time.time()

    def handle_signals(self) -> None:
        """SIGTERM/SIGINT stop, SIGHUP reloads; call from the main thread before start() so no signal is missed."""
        signal.signal(signal.SIGTERM, lambda *_: self.stop_event.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop_event.set())
        signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=self.reload, daemon=True).start())

    def serve_forever(self) -> int:
        """Block until stopped, then drain."""
        self.stop_event.wait()
        self.shutdown()
        return 0

    def shutdown(self) -> None:
        """Drain: wait for the running cycle, persist, flush notifications, stop serving."""
        log.info("shutting down")
        self.scheduler.shutdown(wait=True)
        self._persist()
        if self.notifier is not None:
            self.notifier.flush(10.0)
            self.notifier.close()
        if self.web is not None:
            self.web.stop()
        self.scraper.close()

    # -- one cycle -----------------------------------------------------------------------------------
    def cycle(self) -> list[Diagnosis]:
        """Scrape every target, evaluate the rules, publish the diagnoses."""
        with self._lock:
            start = time.monotonic()
            if self.source is not None:
                cycle = self.source.cycle(time.time())
                return self._publish(cycle, start) if cycle is not None else []
            self._sync_targets()
            specs = list(self._specs.values())
            deadline = max((s.http.total_timeout for s in specs), default=1.0) + 1.0
            for r in self.scraper.scrape(specs, deadline):
                before = self.pipeline.targets.get(r.target)
                was = (before.up, before.last_error) if before else (None, "")
                self.pipeline.observe(r.target, r.t, r.text, r.error, r.duration_s)
                self._log_health(r.target, was)
                self.state.set_target(self.pipeline.targets[r.target])
            return self._publish(self.pipeline.evaluate(time.time()), start)

    def _publish(self, cycle: Cycle, start: float) -> list[Diagnosis]:
        self.state.publish(cycle.diagnoses, cycle.t, time.monotonic() - start, len(cycle.evaluation.errors))
        if self.notifier is not None:
            self.notifier.observe(cycle.diagnoses, cycle.t)
        self._announce(cycle.diagnoses)
        self._persist()
        return cycle.diagnoses

    def _log_health(self, name: str, was: tuple[bool | None, str]) -> None:
        target = self.pipeline.targets[name]
        if target.up is False:
            # Say it when a target goes down (and when the reason changes), not on every cycle.
            level = logging.WARNING if was != (False, target.last_error) else logging.DEBUG
            log.log(level, "target %s down: %s", name, target.last_error, extra={"target": name})
        elif was[0] is False:
            log.info("target %s is back up", name, extra={"target": name})

    def _announce(self, diagnoses: list[Diagnosis]) -> None:
        for d in diagnoses:
            key = (d.target, d.model_name)
            prev = self._last.get(key)
            if prev != d.verdict:
                log.info("%s · %s: %s (was %s)", d.target, d.model_name or "-", d.verdict, prev or "-",
                         extra={"target": d.target, "model_name": d.model_name, "bottleneck": d.verdict})  # fmt: skip
                if self.on_change:
                    self.on_change(d, prev)
            self._last[key] = d.verdict

    def _persist(self) -> None:
        if self.cfg.state_file:
            try:
                persist.save(self.cfg.state_file, self.pipeline)
            except OSError as exc:
                log.error("cannot write state file %s: %s", self.cfg.state_file, exc)

    # -- targets, reload --------------------------------------------------------------------------------
    def _sync_targets(self) -> None:
        wanted = {t.name: t for t in [*self.cfg.targets, *self.discovery.targets()]}
        for gone in set(self._specs) - set(wanted):
            self.pipeline.remove_target(gone)
            self.state.drop_target(gone)
        self.scraper.forget(set(self._specs) - set(wanted))
        for name, spec in wanted.items():
            old = self._specs.get(name)
            if old is None or old != spec:
                self.state.set_target(self.pipeline.add_target(name, target_facts(spec)))
        self._specs = wanted

    def reload(self) -> tuple[bool, str]:
        """Re-read config and rules; a bad file keeps the last good one running."""
        try:
            cfg, groups = load_everything(self.cfg_path, self.overrides)
        except (ConfigError, RuleLoadError) as exc:
            self.state.note_reload(False, time.time(), str(exc))
            log.error("reload failed, keeping the running config: %s", exc)
            return False, str(exc)
        with self._lock:
            notify_changed = cfg.notify != self.cfg.notify
            self.cfg = cfg
            self.discovery = FileDiscovery(cfg.file_sd)
            self.pipeline.set_rules(groups)
            self.pipeline.runbook_url = self._runbook_page()
            self._sync_targets()
        if notify_changed and self.notifier is not None:
            # open incidents and Slack threads live in the notifier's state dir, so a new notifier picks them up
            self.notifier.flush(5.0)
            self.notifier.close()
            self.notifier = None
            self._start_notifier()
        self.state.note_reload(True, time.time())
        log.info("reloaded config and %d rule groups", len(groups))
        return True, "reloaded"

    def _bound(self) -> tuple[str | None, bool]:
        if self.web is None:
            return None, False
        host, port = self.web.address
        return (f"[{host}]:{port}" if ":" in host else f"{host}:{port}"), self.web.tls

    def _runbook_page(self) -> str:
        """Where findings link to: the configured runbook or external URL, else the address the server is bound to."""
        return self.cfg.runbook_page(*self._bound())

    def _external_url(self) -> str:
        """The URL users reach this daemon at: external_url, else from the bound (or configured) listen address."""
        bound, tls = self._bound()
        return (self.cfg.external_url or default_external_url(bound or self.cfg.listen, tls)).rstrip("/")

    def _notify_status(self) -> dict[str, Any]:
        # the web server starts before the notifier (its address is in the links), so there may be none yet
        return {"notify": self.notifier.status()} if self.notifier is not None else {}

    def _start_notifier(self) -> None:
        if not self.cfg.notify and not any(k.startswith("KVDOCTOR_SLACK") for k in os.environ):
            return
        ncfg, errors = parse_notify_config(self.cfg.notify, os.environ)
        if errors:
            raise ConfigError(located_errors(self.cfg, errors))
        # links a message carries default to this daemon: its status page, and the page as the generator URL
        base = self._external_url()
        am = replace(ncfg.alertmanager, generator_url=ncfg.alertmanager.generator_url or base + "/")
        ncfg = replace(ncfg, status_page_url=ncfg.status_page_url or base, alertmanager=am)
        state_dir = Path(self.cfg.state_file).parent if self.cfg.state_file else Path(".kvdoctor")
        if not self.cfg.state_file:
            log.warning("no state_file configured: notification state is kept in %s", state_dir.resolve())
        self.notifier = Notifier(ncfg, state_dir)

    def _event(self, event: JobEvent) -> None:
        name = EVENTS.get(event.code, "other")
        self.state.count_event(name)
        if name == "error":
            log.error("cycle failed: %s", getattr(event, "exception", ""))
