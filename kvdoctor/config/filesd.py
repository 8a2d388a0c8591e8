"""Prometheus file_sd files (JSON or YAML): target groups with labels, read into TargetSpecs with file:line errors."""

from __future__ import annotations

import json
from typing import Any

import yaml

from kvdoctor.config.schema import ScrapeDefaults, TargetSpec
from kvdoctor.config.targets import parse_target
from kvdoctor.config.yamlpos import locate

# file_sd labels kvdoctor understands (others are kept as target labels)
SCHEME, PATH = "__scheme__", "__metrics_path__"
FACTS = {"max_num_seqs": "kvdoctor_max_num_seqs", "model": "kvdoctor_model", "gpu": "kvdoctor_gpu"}


def read_file_sd(path: str, defaults: ScrapeDefaults | None = None) -> tuple[list[TargetSpec], list[str]]:
    """Parse one file_sd file: a list of {targets: [host:port], labels: {...}}."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if path.endswith(".json"):
            json.loads(text)  # strict JSON first; YAML (a superset) then gives the lines
        doc = locate(text, path)
    except OSError as exc:
        return [], [f"{path}: cannot read: {exc.strerror or exc}"]
    except (ValueError, yaml.YAMLError) as exc:
        return [], [f"{path}: {exc}"]
    data: Any = doc.value
    if not isinstance(data, list):
        return [], [f"{doc.where()}: expected a list of target groups"]
    out: list[TargetSpec] = []
    errors: list[str] = []
    for i, group in enumerate(data):
        if not isinstance(group, dict) or not isinstance(group.get("targets"), list):
            errors.append(f"{doc.where(i)}: group {i}: needs a `targets` list")
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
