"""The daemon's notifier, from the config's notify section and the KVDOCTOR_SLACK_* environment."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from kvdoctor.config import Config, ConfigError
from kvdoctor.diagnosis.target import Target
from kvdoctor.notify import Notifier, parse_notify_config

log = logging.getLogger("kvdoctor")


def build_notifier(
    cfg: Config, base_url: str, targets: Mapping[str, Target] | None = None
) -> Notifier | None:
    """A Notifier whose links point at base_url (this daemon), or None when nothing is configured; alerts
    carry the `job` Prometheus scrapes a target in (from `targets`, the pipeline's), else the config's `job`."""
    if not cfg.notify and not any(k.startswith("KVDOCTOR_SLACK") for k in os.environ):
        return None
    ncfg, errors = parse_notify_config(cfg.notify, os.environ, cfg.doc)
    if errors:
        raise ConfigError(errors)
    # links a message carries default to this daemon: its status page, and the page as the generator URL
    am = replace(
        ncfg.alertmanager, generator_url=ncfg.alertmanager.generator_url or base_url + "/", job=cfg.job
    )
    ncfg = replace(ncfg, status_page_url=ncfg.status_page_url or base_url, alertmanager=am)
    state_dir = Path(cfg.state_file).parent if cfg.state_file else Path(".kvdoctor")
    if not cfg.state_file:
        log.warning("no state_file configured: notification state is kept in %s", state_dir.resolve())
    notifier = Notifier(ncfg, state_dir)
    # Prometheus' job of each target (--source prometheus); scraped here, the pack's alerts carry the config's job
    if notifier.alertmanager is not None and targets is not None and cfg.source == "prometheus":
        notifier.alertmanager.job_of = lambda name: (
            targets[name].labels.get("job") if name in targets else None
        )
    return notifier
