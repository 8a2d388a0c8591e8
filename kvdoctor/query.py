"""Instant queries over recordings: load them into a store as if scraped live, answer like Prometheus' API."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import promql_parser as pp

from kvdoctor.ingest.parse import ParseError, Parser
from kvdoctor.ingest.recording import RecordingError, load_frames
from kvdoctor.jsondoc import JsonObject
from kvdoctor.promql.engine import Evaluator
from kvdoctor.promql.values import Range, Scalar, String, Value, format_value
from kvdoctor.store import Store

UNBOUNDED_S = 10 * 365 * 86400.0


def recording_instance(path: str | Path, names: Mapping[str, str] | None = None) -> str:
    """The instance label a recording's series get: its name in `names`, else its sidecar's line, else its file name.

    `names` (by path as given) is what `report --target-name` says.
    A sidecar lets recordings of one target split over several files replay (and report) as that one target.
    """
    if names and str(path) in names:
        return names[str(path)]
    p = Path(path)
    name = p.name
    for ext in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(ext)
    sidecar = p.with_name(f"{name}.target")
    if sidecar.is_file():
        given = sidecar.read_text(encoding="utf-8").strip()
        if not given or "\n" in given:
            raise RecordingError(f"{sidecar}:1: expected one line, the target's name (e.g. vllm-0:8000)")
        return given
    return name


def load_store(
    recordings: list[tuple[str, str, float]], *, job: str = "vllm", staleness_markers: bool = True
) -> Store:
    """A store holding recordings, each (path, instance, time shift in s); one instance twice appends in time."""
    store = Store(retention_s=UNBOUNDED_S)
    parsers: dict[str, Parser] = {}
    for path, instance, shift in recordings:
        parser = parsers.setdefault(instance, Parser())
        extra = (("instance", instance), ("job", job))
        for frame in load_frames(path):
            t_ms = round((frame.t + shift) * 1000)
            if frame.text is None:
                if staleness_markers:
                    store.mark_down(instance, t_ms)
                continue
            try:
                scrape = parser.parse(frame.text)
            except ParseError:
                if staleness_markers:
                    store.mark_down(instance, t_ms)
                continue
            store.ingest(instance, t_ms, scrape.samples, extra, staleness=staleness_markers)
    return store


def instant_query(store: Store, expr: str, t: float, subquery_step_s: float = 60.0) -> JsonObject:
    """Evaluate expr at t (unix seconds); returns what Prometheus' /api/v1/query returns under `data`."""
    node = pp.parse(expr)
    t_ms = round(t * 1000)
    value = Evaluator(store, subquery_step_ms=round(subquery_step_s * 1000)).instant(node, t_ms)
    if not value and isinstance(node, pp.MatrixSelector | pp.SubqueryExpr):
        return {"resultType": "matrix", "result": []}
    return to_api(value, t_ms / 1000)


def to_api(value: Value, t: float) -> JsonObject:
    """A value in the shape of Prometheus' HTTP API."""
    if isinstance(value, Scalar):
        return {"resultType": "scalar", "result": [t, format_value(value.v)]}
    if isinstance(value, String):
        return {"resultType": "string", "result": [t, value.s]}
    if value and isinstance(value[0], Range):
        return {
            "resultType": "matrix",
            "result": [
                {
                    "metric": dict(r.labels),
                    "values": [[ts / 1000, format_value(v)] for ts, v in zip(r.ts, r.vs, strict=True)],
                }
                for r in value
            ],
        }
    return {
        "resultType": "vector",
        "result": [{"metric": dict(e.labels), "value": [t, format_value(e.v)]} for e in value],  # type: ignore[union-attr]
    }
