"""Notify config errors placed where the user wrote them: file:line of the config, or the environment."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kvdoctor.config import Config
from kvdoctor.config.yamlpos import locate
from kvdoctor.notify.config import ENV_KEYS


def _where(cfg: Config, error: str) -> str:
    """Prefix a notify error with file:line (of the deepest key it names) or with `environment`."""
    path = error.split(":", 1)[0]
    if path in ENV_KEYS:
        return f"environment: {error}"
    if not cfg.path:
        return f"<no config file>: {error}"
    try:
        doc = locate(Path(cfg.path).read_text(encoding="utf-8"), cfg.path)
    except Exception:
        return f"{cfg.path}: {error}"
    keys: list[Any] = []
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        keys.append(int(index) if index else name)
    return f"{doc.where(*keys)}: {error}"


def located_errors(cfg: Config, errors: list[str]) -> list[str]:
    """Notify config errors prefixed with the config's file:line (or `environment` for KVDOCTOR_SLACK_*)."""
    return [_where(cfg, e) for e in errors]
