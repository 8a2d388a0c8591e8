"""The state file: what is pending or firing since when, and learned baselines, so a restart forgets nothing."""

from __future__ import annotations

import glob
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from kvdoctor.daemon.statefile import VERSION, problem
from kvdoctor.diskfiles import set_aside, unlink_quietly
from kvdoctor.pipeline import Pipeline
from kvdoctor.report.history import History
from kvdoctor.samples import Sample
from kvdoctor.sanity import finite, scrub
from kvdoctor.whatif.ledgerstate import restored

log = logging.getLogger(__name__)
__all__ = ["VERSION", "ledger_json", "load", "save"]
# Recorded series that carry learned state from one evaluation to the next.
STATEFUL = (
    "kvdoctor:itl_seconds:baseline",
    "kvdoctor:batch_cap:plateau",
    "kvdoctor:traffic:last_timestamp_seconds",
)


def ledger_json(pipeline: Pipeline, now: float | None = None) -> str | None:
    """The advisor's step ledger as the state file's JSON (None: no advisor)."""
    if pipeline.advisor is None:
        return None
    doc = pipeline.advisor.ledger.to_state(time.time() if now is None else now)
    try:
        return json.dumps(doc, allow_nan=False)
    except ValueError:  # written as null, so the load drops the ledger alone and says why
        return json.dumps(scrub(doc), allow_nan=False)


def save(
    path: str | Path,
    pipeline: Pipeline,
    history: History | None = None,
    now: float | None = None,
    ledger: str | None = None,
) -> None:
    """Write the state (the report's hourly history, the advisor's step ledger: `ledger_json`, made here unless
    given) atomically (temp file + rename)."""
    series = []
    for name in STATEFUL:
        for s in pipeline.store.select(name):
            points = [(t, v) for t, v in zip(s.ts, s.vs, strict=True) if finite(v) is not None][-240:]
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
    try:  # JSON has no Infinity: a reader of the file (kvdoctor too, before) would choke on one
        text = json.dumps(doc, allow_nan=False)
    except ValueError:  # one slipped past the checks at the door: written as null rather than not at all
        text = json.dumps(scrub(doc), allow_nan=False)
    ledger = ledger_json(pipeline, now) if ledger is None else ledger
    if ledger is not None:  # a day of each target's step costs, so a deploy does not forget them
        text = f'{text[:-1]}, "step_ledger": {ledger}}}'
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=p.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        unlink_quietly(tmp)  # a full disk must not fill up further with half-written copies
        raise


def load(
    path: str | Path, pipeline: Pipeline, history: History | None = None, now: float | None = None
) -> bool:
    """Restore state saved by save(); a missing file starts fresh, a corrupt one is moved aside (and said why), a
    wrong step ledger is dropped alone (and said why)."""
    p = Path(path)
    for stale in p.parent.glob(glob.escape(p.name) + "*.tmp"):
        unlink_quietly(stale)  # left by a write that was killed or failed before its rename
    if not p.exists():
        return False
    try:
        doc: Any = json.loads(p.read_bytes().decode("utf-8"))
    except OSError as exc:
        log.warning("state file %s cannot be read (%s): starting without its state", p, exc)
        return False
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both are
        return _fresh(p, f"not JSON ({exc})")
    why = problem(doc)  # the shape save() writes; Infinity from an older kvdoctor is still a number here
    if why is not None:
        return _fresh(p, why)
    _restore_ledger(p, doc.get("step_ledger"), pipeline, time.time() if now is None else now)
    doc = scrub(doc)  # ... and read as null from here on, so no restored value is infinite
    pipeline.rules.restore(doc.get("alerts") or [])
    pipeline.classifier.restore(doc.get("classifier") or {})
    if history is not None:
        history.restore(doc.get("report_history") or {})
    for item in doc.get("series") or []:
        labels = tuple(tuple(x) for x in item["labels"])
        name = dict(labels).get("__name__", "")
        rest = tuple((k, v) for k, v in labels if k != "__name__")
        for t, v in item["points"]:
            if finite(v) is None or finite(t) is None:
                continue
            pipeline.store.ingest(
                f"restored:{name}:{rest}", int(t), [Sample(name, rest, float(v))], staleness=False
            )
    return True


def _restore_ledger(p: Path, part: Any, pipeline: Pipeline, now: float) -> None:
    # checked apart from the rest: a day of step costs is worth less than the alerts' state, so it alone goes
    if part is None or pipeline.advisor is None:  # a file from before the ledger was kept
        return
    ledgers = restored(part, now)
    if isinstance(ledgers, str):
        log.warning(
            "state file %s: its step ledger is dropped (%s); the rest of the state is restored", p, ledgers
        )
    else:
        pipeline.advisor.ledger.adopt(ledgers)


def _fresh(p: Path, why: str) -> bool:
    aside = set_aside(p)
    kept = f"moved to {aside}" if aside else "left in place (it cannot be renamed)"
    log.warning("state file %s is corrupt: %s; %s, starting fresh", p, why, kept)
    return False
