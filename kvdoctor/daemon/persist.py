"""The state file: what is pending or firing since when, and learned baselines, so a restart forgets nothing."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from kvdoctor.pipeline import Pipeline
from kvdoctor.report.history import History
from kvdoctor.samples import Sample

log = logging.getLogger(__name__)
VERSION = 1
# Recorded series that carry learned state from one evaluation to the next.
STATEFUL = (
    "kvdoctor:itl_seconds:baseline",
    "kvdoctor:batch_cap:plateau",
    "kvdoctor:traffic:last_timestamp_seconds",
)


def save(path: str | Path, pipeline: Pipeline, history: History | None = None) -> None:
    """Write the state (and the report's hourly history) atomically (temp file + rename)."""
    series = []
    for name in STATEFUL:
        for s in pipeline.store.select(name):
            points = [(t, v) for t, v in zip(s.ts, s.vs, strict=True) if v is not None][-240:]
            if points:
                series.append({"labels": [list(p) for p in s.labels], "points": points})
    doc = {
        "version": VERSION,
        "alerts": pipeline.rules.to_state(),
        "classifier": pipeline.classifier.to_state(),
        "series": series,
    }
    if history is not None:
        doc["report_history"] = history.to_state()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=p.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, p)


def load(path: str | Path, pipeline: Pipeline, history: History | None = None) -> bool:
    """Restore state saved by save(); a missing or unreadable file starts fresh (and says why)."""
    p = Path(path)
    if not p.exists():
        return False
    try:
        doc: dict[str, Any] = json.loads(p.read_text(encoding="utf-8"))
        if doc.get("version") != VERSION:
            raise ValueError(f"unknown version {doc.get('version')!r}")
    except (OSError, ValueError) as exc:
        log.warning("state file %s ignored: %s", p, exc)
        return False
    pipeline.rules.restore(doc.get("alerts") or [])
    pipeline.classifier.restore(doc.get("classifier") or {})
    if history is not None:
        history.restore(doc.get("report_history") or {})
    for item in doc.get("series") or []:
        labels = tuple(tuple(x) for x in item["labels"])
        name = dict(labels).get("__name__", "")
        rest = tuple((k, v) for k, v in labels if k != "__name__")
        for t, v in item["points"]:
            pipeline.store.ingest(
                f"restored:{name}:{rest}", int(t), [Sample(name, rest, float(v))], staleness=False
            )  # type: ignore[arg-type]
    return True
