"""What a reload reads, the settings it applies, and those that only a restart can change."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from kvdoctor.config import Config, ConfigError, TargetSpec, load_config
from kvdoctor.config.schema import Overrides
from kvdoctor.config.targets import parse_target
from kvdoctor.config.yamlpos import Located
from kvdoctor.notify import parse_notify_config
from kvdoctor.rules.loader import RuleGroup, RuleLoadError, load_files, rule_files

# Config fields a running daemon cannot change, with the reason given to the operator.
RESTART_ONLY = {
    "listen": "the listening socket is bound at start",
    "health_listen": "the health listener's socket is bound at start",
    "source": "the source (scrape or prometheus) is chosen at start",
    "state_file": "incident and notification state live beside it",
    "retention_s": "the series store is sized at start",
}
NAMES = {
    "retention_s": "retention",
    "interval_s": "interval",
    "scrape_max_connections": "scrape.max_connections",
}


RELOAD_DEADLINE_S = 20.0  # reading and checking a reload's files; past it the reload is refused


def load_everything(
    cfg_path: str | None, overrides: Overrides, deadline: float | None = None
) -> tuple[Config, list[RuleGroup]]:
    """Config (with CLI overrides) and rules; raises ConfigError/RuleLoadError listing every problem.

    deadline: a time.monotonic() past which the rule files are no longer checked (RuleLoadError)."""
    cfg = load_config(cfg_path)
    errors: list[str] = []
    for key, value in overrides.given():
        if key != "targets":
            setattr(cfg, key, value)
    if overrides.targets is not None:  # --target URLs get the config's `scrape:` defaults like any other
        flags = Located({}, {}, "--target")
        specs = (
            v if isinstance(v, TargetSpec) else parse_target(v, flags, (), errors, cfg.scrape)
            for v in overrides.targets
        )
        cfg.targets = [v for v in specs if v is not None]
    if errors:
        raise ConfigError(errors)
    return cfg, load_files(rule_files(cfg.rules), deadline)


def load_off_thread(
    cfg_path: str | None,
    overrides: Overrides,
    running: Config,
    stop: threading.Event,
    timeout_s: float = RELOAD_DEADLINE_S,
) -> tuple[Config, list[RuleGroup]]:
    """load_everything and refuse_unless_applicable on a thread of its own; refused (ConfigError) past timeout_s
    or once stop is set.

    The caller never holds the cycle lock while this runs, and SIGTERM (stop) does not wait for it; the loader
    stops by itself at the deadline too, so an abandoned check does not keep a core busy.
    """
    if stop.is_set():
        raise ConfigError(["reload abandoned: kvdoctor is stopping"])
    deadline = time.monotonic() + timeout_s
    done = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            cfg, groups = load_everything(cfg_path, overrides, deadline)
            refuse_unless_applicable(running, cfg)
            result["loaded"] = cfg, groups
        except BaseException as exc:  # handed to the caller: every failure is a refused reload
            result["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="kvdoctor-reload-check", daemon=True).start()
    while not done.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
        if stop.is_set():
            raise ConfigError(["reload abandoned: kvdoctor is stopping"])
        if time.monotonic() >= deadline:
            raise ConfigError([f"reload refused: reading and checking the files took over {timeout_s:g}s"])
    if "error" in result:
        raise result["error"]
    return result["loaded"]  # type: ignore[no-any-return]


def refusal(exc: Exception) -> str:
    """What a refused reload says: the error's own message, with its type when it is not one about the input."""
    known = isinstance(exc, ConfigError | RuleLoadError | ValueError | OSError)
    return str(exc) if known else f"{type(exc).__name__}: {exc}"


def restart_needed(old: Config, new: Config) -> list[str]:
    """One line per restart-only setting that differs between the running config and the new one."""
    out = []
    for attr, why in RESTART_ONLY.items():
        before, after = getattr(old, attr), getattr(new, attr)
        if before != after:
            out.append(f"{NAMES.get(attr, attr)}: {before!r} -> {after!r} needs a restart ({why})")
    return out


def refuse_unless_applicable(old: Config, new: Config) -> None:
    """Raise ConfigError naming what keeps the new config from being applied whole to a running daemon."""
    refused = restart_needed(old, new)
    if refused:
        raise ConfigError(["nothing applied, the running config stays in force:", *refused])
    if new.notify != old.notify:
        _, errors = parse_notify_config(new.notify, os.environ, new.doc)
        if errors:
            raise ConfigError(errors)


def changes(old: Config, new: Config) -> list[str]:
    """The settings a reload applies, for the log and /api/v1/status (secrets never shown)."""
    out = []
    if old.interval_s != new.interval_s:
        out.append(f"interval {old.interval_s:g}s -> {new.interval_s:g}s")
    before, after = {t.name: t for t in old.targets}, {t.name: t for t in new.targets}
    added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
    changed = sorted(n for n in set(before) & set(after) if before[n] != after[n])
    for what, names in (("added", added), ("removed", removed), ("changed", changed)):
        if names:
            out.append(f"targets {what}: {', '.join(names[:5])}{' …' if len(names) > 5 else ''}")
    for attr in (
        "scrape",
        "scrape_max_connections",
        "file_sd",
        "kubernetes_sd",
        "rules",
        "job",
        "web_config",
        "prometheus",
        "external_url",
        "runbook_url",
    ):
        if getattr(old, attr) != getattr(new, attr):
            out.append(f"{NAMES.get(attr, attr)} changed")
    if old.notify != new.notify:
        out.append("notify changed")
    if (old.log_format, old.log_level) != (new.log_format, new.log_level):
        out.append(f"log {new.log_format}/{new.log_level}")
    return out
