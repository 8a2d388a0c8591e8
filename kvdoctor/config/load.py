"""Read and validate the YAML config; every error names the file, line and key, and all are reported at once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kvdoctor.config.durations import duration_seconds
from kvdoctor.config.podsd import parse_kubernetes_sd
from kvdoctor.config.schema import Config, FileSD, PrometheusSource, ScrapeDefaults, check_url, parse_listen
from kvdoctor.config.targets import count, http_options, limits, parse_target
from kvdoctor.config.yamlpos import KeyPath, Located, locate, yaml_error
from kvdoctor.errors import ValidationError

TOP_KEYS = {
    "kubernetes_sd",  # pods found through the API server (config/podsd.py)
    "interval",
    "idle_after",
    "listen",
    "job",
    "retention",
    "rules",
    "state_file",
    "log",
    "scrape",
    "targets",
    "file_sd",
    "source",
    "prometheus",
    "web_config",
    "notify",
    "external_url",
    "runbook_url",
    "health_listen",
}
SCRAPE_KEYS = {
    "timeout",
    "max_bytes",
    "max_connections",
    "sample_limit",
    "label_limit",
    "label_value_length_limit",
}
ENV = {
    "KVDOCTOR_INTERVAL": "interval",
    "KVDOCTOR_LISTEN": "listen",
    "KVDOCTOR_JOB": "job",
    "KVDOCTOR_STATE_FILE": "state_file",
    "KVDOCTOR_WEB_CONFIG": "web_config",
    "KVDOCTOR_SOURCE": "source",
    "KVDOCTOR_RETENTION": "retention",
    "KVDOCTOR_EXTERNAL_URL": "external_url",
    "KVDOCTOR_RUNBOOK_URL": "runbook_url",
    "KVDOCTOR_HEALTH_LISTEN": "health_listen",
}
# Defaults an environment (the container image) sets below the file: a config that says `listen:` still wins.
DEFAULT_ENV = {"KVDOCTOR_DEFAULT_LISTEN": "listen", "KVDOCTOR_DEFAULT_HEALTH_LISTEN": "health_listen"}


class ConfigError(ValidationError):
    """Every problem in a config, one per line."""


def load_config(path: str | None, env: Mapping[str, str] | None = None) -> Config:
    """Load path (None: defaults only), apply KVDOCTOR_* overrides, validate; raises ConfigError."""
    cfg, errors = check_config(path, env)
    if errors:
        raise ConfigError(errors)
    return cfg


def check_config(path: str | None, env: Mapping[str, str] | None = None) -> tuple[Config, list[str]]:
    """The config as far as it is valid, and every error in it (file:line first); never raises."""
    env = os.environ if env is None else env
    errors: list[str] = []
    doc = Located({}, {}, path or "<defaults>")
    if path:
        try:
            doc = locate(Path(path).read_text(encoding="utf-8"), path)
        except OSError as exc:
            return Config(path=path), [f"{path}: cannot read: {exc.strerror or exc}"]
        except yaml.YAMLError as exc:
            return Config(path=path), [yaml_error(path, exc)]
        if not isinstance(doc.value, dict):
            return Config(path=path), [f"{path}:1: the config must be a mapping"]
    data: dict[str, Any] = dict(doc.value)
    for var, key in DEFAULT_ENV.items():
        if env.get(var) and key not in data:
            data[key] = env[var]
            doc.lines[(key,)] = 0
    for var, key in ENV.items():
        if env.get(var):
            data[key] = env[var]
            doc.lines[(key,)] = 0
    if env.get("KVDOCTOR_TARGETS"):
        data["targets"] = [u.strip() for u in env["KVDOCTOR_TARGETS"].split(",") if u.strip()]
    if env.get("KVDOCTOR_PROMETHEUS_URL"):
        data["prometheus"] = {**(data.get("prometheus") or {}), "url": env["KVDOCTOR_PROMETHEUS_URL"]}
        data.setdefault("source", "prometheus")
    cfg = Config(path=path, doc=doc)
    for key in data:
        if key not in TOP_KEYS:
            errors.append(f"{doc.where(key)}: unknown key {key!r}")
    _scalars(cfg, data, doc, errors)
    for key in ("targets", "file_sd"):
        if data.get(key) is not None and not isinstance(data[key], list):
            errors.append(f"{doc.where(key)}: {key}: must be a list")
            data[key] = []
    for i, item in enumerate(data.get("targets") or []):
        t = parse_target(item, doc, ("targets", i), errors, cfg.scrape)
        if t is not None:
            cfg.targets.append(t)
    names = [t.name for t in cfg.targets]
    for n in sorted({n for n in names if names.count(n) > 1}):
        errors.append(f"{doc.where('targets')}: target name {n!r} used more than once")
    for i, item in enumerate(data.get("file_sd") or []):
        if not isinstance(item, dict) or not isinstance(item.get("files"), list):
            errors.append(f"{doc.where('file_sd', i)}: file_sd entries need a `files:` list")
            continue
        cfg.file_sd.append(
            FileSD([str(f) for f in item["files"]], _dur(item, "refresh", 30.0, doc, ("file_sd", i), errors))
        )
    cfg.kubernetes_sd = parse_kubernetes_sd(data.get("kubernetes_sd"), doc, errors, cfg.scrape)
    prom = data.get("prometheus")
    if prom is not None:
        if not isinstance(prom, dict) or not prom.get("url"):
            errors.append(f"{doc.where('prometheus')}: `prometheus` needs a `url`")
        else:
            cfg.prometheus = PrometheusSource(
                str(prom["url"]), http_options(prom, doc, ("prometheus",), errors)
            )
    if cfg.source not in ("scrape", "prometheus"):
        errors.append(f"{doc.where('source')}: source must be `scrape` or `prometheus`")
    if cfg.source == "prometheus" and cfg.prometheus is None:
        errors.append(f"{doc.where('source')}: source `prometheus` needs `prometheus.url`")
    notify = data.get("notify")
    if notify is not None and not isinstance(notify, dict):
        errors.append(f"{doc.where('notify')}: `notify` must be a mapping")
    cfg.notify = notify if isinstance(notify, dict) else None
    return cfg, errors


def _dur(
    d: dict[str, Any], key: str, default: float, doc: Located, path: KeyPath, errors: list[str]
) -> float:
    v = d.get(key)
    if v is None:
        return default
    try:
        out = duration_seconds(v)
    except ValueError:
        errors.append(f"{doc.where(*path, key)}: {key}: not a duration: {v!r}")
        return default
    if out <= 0:
        errors.append(f"{doc.where(*path, key)}: {key}: must be positive")
        return default
    return out


def _scalars(cfg: Config, data: dict[str, Any], doc: Located, errors: list[str]) -> None:
    cfg.interval_s = _dur(data, "interval", cfg.interval_s, doc, (), errors)
    cfg.idle_after_s = _dur(data, "idle_after", cfg.idle_after_s, doc, (), errors)
    cfg.retention_s = _dur(data, "retention", cfg.retention_s, doc, (), errors)
    for key in ("listen", "health_listen", "job", "state_file", "web_config", "source"):
        if data.get(key) is not None:
            if not isinstance(data[key], str):
                errors.append(f"{doc.where(key)}: {key}: must be a string")
            else:
                setattr(cfg, key, data[key])
    for key in ("external_url", "runbook_url"):
        if data.get(key) is not None:
            problem = check_url(data[key], key)
            if problem:
                errors.append(f"{doc.where(key)}: {problem}")
            else:
                setattr(cfg, key, data[key])
    for key in ("listen", "health_listen"):
        value = getattr(cfg, key)
        try:
            _ = value is None or parse_listen(value)
        except ValueError:
            errors.append(f"{doc.where(key)}: {key}: expected HOST:PORT, got {value!r}")
    rules = data.get("rules")
    if rules is not None:
        rules = [rules] if isinstance(rules, str) else rules
        if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
            errors.append(f"{doc.where('rules')}: rules: a path or a list of paths")
        else:
            cfg.rules = rules
    log = data.get("log") or {}
    if not isinstance(log, dict):
        errors.append(f"{doc.where('log')}: log: must be a mapping")
        log = {}
    cfg.log_format = str(log.get("format", cfg.log_format))
    cfg.log_level = str(log.get("level", cfg.log_level)).lower()
    if cfg.log_format not in ("text", "json"):
        errors.append(f"{doc.where('log', 'format')}: log.format: `text` or `json`")
    if cfg.log_level not in ("debug", "info", "warning", "error"):
        errors.append(f"{doc.where('log', 'level')}: log.level: debug, info, warning or error")
    scrape = data.get("scrape") or {}
    if not isinstance(scrape, dict):
        errors.append(f"{doc.where('scrape')}: scrape: must be a mapping")
        scrape = {}
    for key in scrape:
        if key not in SCRAPE_KEYS:
            errors.append(f"{doc.where('scrape', key)}: unknown key scrape.{key}")
    base = ScrapeDefaults()
    cfg.scrape = ScrapeDefaults(
        timeout_s=_dur(scrape, "timeout", base.timeout_s, doc, ("scrape",), errors),
        max_bytes=count(scrape, "max_bytes", base.max_bytes, doc.where("scrape", "max_bytes"), errors),
        limits=limits(scrape, doc, ("scrape",), errors, base.limits),
    )
    cfg.scrape_max_connections = count(
        scrape, "max_connections", cfg.scrape_max_connections, doc.where("scrape", "max_connections"), errors
    )
