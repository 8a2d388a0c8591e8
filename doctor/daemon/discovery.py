"""Targets from Prometheus file_sd files (JSON or YAML), re-read when a file changes."""

from __future__ import annotations

import glob
import json
import logging
import os
from typing import Any

import yaml

from doctor.config import TargetSpec
from doctor.config.schema import FileSD, ScrapeDefaults
from doctor.config.targets import parse_target
from doctor.config.yamlpos import Located

log = logging.getLogger(__name__)
# file_sd labels kvdoctor understands (others are kept as target labels)
SCHEME, PATH = "__scheme__", "__metrics_path__"
FACTS = {"max_num_seqs": "kvdoctor_max_num_seqs", "model": "kvdoctor_model", "gpu": "kvdoctor_gpu"}


class FileDiscovery:
    """Keeps the targets of file_sd files, re-reading a file only when its mtime or size changes."""

    def __init__(self, sds: list[FileSD], defaults: ScrapeDefaults | None = None) -> None:
        self.sds = sds
        self.defaults = defaults or ScrapeDefaults()
        self._seen: dict[str, tuple[float, int]] = {}
        self._targets: dict[str, list[TargetSpec]] = {}
        self.errors: list[str] = []

    def targets(self) -> list[TargetSpec]:
        """The current targets of every file (a file that turns bad keeps its last good targets)."""
        self.errors = []
        paths = sorted({p for sd in self.sds for pattern in sd.files for p in glob.glob(pattern)})
        for gone in set(self._targets) - set(paths):
            del self._targets[gone]
            self._seen.pop(gone, None)
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            sig = (st.st_mtime, st.st_size)
            if self._seen.get(path) == sig:
                continue
            targets, errors = read_file_sd(path, self.defaults)
            if errors:
                self.errors += errors
                for e in errors:
                    log.warning("file_sd: %s", e)
                if path in self._targets:
                    continue  # keep the last good version
            self._seen[path] = sig
            self._targets[path] = targets
        return [t for p in sorted(self._targets) for t in self._targets[p]]


def read_file_sd(path: str, defaults: ScrapeDefaults | None = None) -> tuple[list[TargetSpec], list[str]]:
    """Parse one file_sd file: a list of {targets: [host:port], labels: {...}}."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        data: Any = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        return [], [f"{path}: {exc}"]
    if not isinstance(data, list):
        return [], [f"{path}: expected a list of target groups"]
    out: list[TargetSpec] = []
    errors: list[str] = []
    doc = Located(data, {}, path)
    for i, group in enumerate(data):
        if not isinstance(group, dict) or not isinstance(group.get("targets"), list):
            errors.append(f"{path}: group {i}: needs a `targets` list")
            continue
        labels = {str(k): str(v) for k, v in (group.get("labels") or {}).items()}
        scheme, mpath = labels.pop(SCHEME, "http"), labels.pop(PATH, "/metrics")
        item: dict[str, Any] = {}
        for key, label in FACTS.items():
            if label in labels:
                v = labels.pop(label)
                item[key] = int(v) if key == "max_num_seqs" and v.isdigit() else v
        for addr in group["targets"]:
            spec = parse_target(
                {**item, "url": f"{scheme}://{addr}{mpath}", "labels": labels}, doc, (i,), errors, defaults
            )
            if spec is not None:
                out.append(spec)
    return out, errors
