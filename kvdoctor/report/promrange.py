"""History from a Prometheus: `query_range` over kvdoctor's exported series and the vLLM counters, in chunks.

Classes and gauges come from the `kvdoctor_*` series a scraped kvdoctor exposes (or a replay backfilled with
`--export-openmetrics`); tokens and requests from the vLLM counters, with the same increase logic as recordings
(every scrape's increase counts, a restart loses nothing).
Each gauge is read only where its sample is fresh (newer than one step), so a series that stopped is not carried
on by Prometheus' 5-minute lookback. Where Prometheus holds a target's `up`, the target is charged the steps its
`up` is fresh, as `unknown` where no verdict was exported then, and not the steps it was not scraped in.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from collections.abc import Callable
from typing import TextIO

from kvdoctor.report.collect import COUNTERS, Grid
from kvdoctor.report.history import History, Key, RangeClient, ReportError
from kvdoctor.report.promrules import RuleClasses
from kvdoctor.report.steps import Step
from kvdoctor.signals import SIGNALS
from kvdoctor.verdicts import LIMITS, VERDICTS

MAX_POINTS = 11_000  # Prometheus refuses a query_range answer with more points per series
CHUNK_POINTS = 1_440  # a day at one-minute steps per request, so long ranges show progress
CLASS = "kvdoctor_bottleneck_code"
DOWN = 'kvdoctor_finding{finding="target_down"}'
# Step field -> the evidence key whose kvdoctor_* gauge carries it (kvdoctor.signals names the gauge).
GAUGE_KEYS = {
    "kv": "kv_usage",
    "running": "running",
    "waiting": "waiting",
    "cap_configured": "batch_cap_configured",
    "cap_inferred": "batch_cap_inferred",
    "gen_tps": "generation_tokens_per_s",
    "itl_p50": "itl_p50_s",
    "itl_baseline": "itl_baseline_s",
    "preemptions_per_s": "preemptions_per_s",
}
GAUGES = {what: SIGNALS[key].metric for what, key in GAUGE_KEYS.items()}
Progress = Callable[[int, int], None]
_RE2_SPECIAL = set("\\.+*?()|[]{}^$")


def fresh(expr: str, step: float) -> str:
    """expr where its sample is newer than one step (backfilled series carry no staleness markers)."""
    return f"{expr} and (timestamp({expr}) > time() - {step:g})"


def chunks(start: float, end: float, step: float, points: int = CHUNK_POINTS) -> list[tuple[float, float]]:
    """[start, end] cut on the step grid into pieces of at most `points` points each."""
    if step <= 0 or end < start:
        raise ValueError("the range must have end ≥ start and a positive step")
    n = math.floor((end - start) / step + 1e-9) + 1
    points = min(points, MAX_POINTS - 1)
    return [(start + i * step, start + (min(n, i + points) - 1) * step) for i in range(0, n, points)]


def progress_bar(out: TextIO = sys.stderr) -> Progress:
    """A one-line progress bar on out (stderr), redrawn per chunk."""

    def show(done: int, total: int) -> None:
        width = 30
        filled = round(width * done / total)
        out.write(f"\rquerying Prometheus [{'#' * filled}{'.' * (width - filled)}] {done}/{total} chunks")
        if done == total:
            out.write("\n")
        out.flush()

    return show


def _target_key(labels: dict[str, str]) -> Key:
    return labels.get("target", ""), labels.get("model_name", "")


def from_prometheus(
    client: RangeClient,
    start: float,
    end: float,
    step: float = 60.0,
    progress: Progress | None = None,
    chunk_points: int = CHUNK_POINTS,
) -> History:
    """Read [start, end] at `step` into a History; raises ReportError when neither kvdoctor's nor the pack's series are there."""
    pieces = chunks(start, end, step, chunk_points)
    grid = Grid(f"Prometheus {client.base}", start, step)
    classes: dict[int, dict[Key, str]] = defaultdict(dict)
    gauges: dict[int, dict[Key, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    grid.last_ms = round(pieces[-1][1] * 1000)
    for done, (a, b) in enumerate(pieces, 1):
        for labels, points in client.query_range(fresh(CLASS, step), a, b, step):
            for t, v in points:
                if 0 <= v < len(VERDICTS):
                    classes[grid.index(t)][_target_key(labels)] = VERDICTS[int(v)]
        for labels, points in client.query_range(fresh(DOWN, step), a, b, step):
            for t, _ in points:
                gauges[grid.index(t)][_target_key(labels)]["down"] = 1.0
        for what, name in GAUGES.items():
            for labels, points in client.query_range(fresh(name, step), a, b, step):
                for t, v in points:
                    gauges[grid.index(t)][_target_key(labels)][what] = v
        _counters(client, grid, a, b, step)
        if progress is not None and len(pieces) > 1:
            progress(done, len(pieces))
    for i, by_key in sorted(classes.items()):
        t = start + i * step
        grid.point(t, {key: _step(t, step, cls, gauges[i].get(key, {})) for key, cls in by_key.items()})
    if not classes:  # no kvdoctor scraped here: classify from the pack's own series, as kvdoctor would
        rules = RuleClasses(client, start, step)
        for a, b in pieces:
            rules.read(a, b, fresh("{0}", step))
        for i, steps in rules.steps().items():
            grid.point(start + i * step, steps)
        if not grid.steps:
            raise ReportError(
                f"{client.base}: no {CLASS} series and no kvdoctor:* recorded signals between {start:.0f} and "
                f"{end:.0f}: load the rule pack into Prometheus (`kvdoctor rules export`) or let it scrape "
                "`kvdoctor serve` (or hold a backfilled `kvdoctor replay --export-openmetrics`)"
            )
        grid.source += " (classified from the rule pack's series)"
    _charge_up(client, grid, pieces, step)
    return grid.history()


def _re2_escaped(text: str) -> str:
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in text)


def up_expr(instances: list[str], step: float) -> str:
    """The query for the steps where any `up` series of one of the instances is fresh, one series per instance."""
    pattern = "|".join(_re2_escaped(i) for i in sorted(instances))
    quoted = '"' + pattern.replace("\\", "\\\\").replace('"', '\\"') + '"'  # a PromQL string literal
    return f"group by (instance) ({fresh('up{instance=~' + quoted + '}', step)})"


def _charge_up(client: RangeClient, grid: Grid, pieces: list[tuple[float, float]], step: float) -> None:
    """Keep a target's steps only where its `up` is fresh and add `unknown` ones where `up` is but no verdict.

    A target without any `up` in the range (a backfilled replay export holds none) keeps its steps as they are.
    """
    models: dict[str, set[str]] = defaultdict(set)
    for by_key in grid.steps.values():
        for target, model in by_key:
            models[target].add(model)
    if not models:
        return
    up: dict[str, set[int]] = defaultdict(set)
    for a, b in pieces:
        for labels, points in client.query_range(up_expr(list(models), step), a, b, step):
            up[labels.get("instance", "")].update(grid.index(t) for t, _ in points)
    for target, indices in up.items():
        if target not in models:
            continue
        for i in set(grid.steps) - indices:
            grid.steps[i] = {k: s for k, s in grid.steps[i].items() if k[0] != target}
        for i in indices:
            by_key = grid.steps.setdefault(i, {})
            for model in models[target]:
                if (target, model) not in by_key:
                    by_key[(target, model)] = Step(grid.start_ms / 1000 + i * step, step, "unknown")
        grid.last_ms = max(grid.last_ms, grid.start_ms + max(indices) * grid.step_ms)


def _counters(client: RangeClient, grid: Grid, a: float, b: float, step: float) -> None:
    """Counter values at each step; where a series restarted within a step, its raw samples there too.

    Between two steps without a reset the increase is the difference of the values, the same as summing every
    scrape's increase; across a reset only the raw samples say how much came before it. Restarts are rare, so
    this costs one point per series and step plus one range-selector query per (counter, step) with a reset.
    """
    points: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, float]]] = defaultdict(list)

    def add(what: str, labels: dict[str, str], values: list[tuple[float, float]]) -> None:
        series = tuple(sorted((k, x) for k, x in labels.items() if k != "__name__"))
        points[(what, series)].extend((round(t * 1000), v) for t, v in values)

    for what, name in COUNTERS.items():
        for labels, values in client.query_range(name, a, b, step):
            add(what, labels, values)
        reset_at = {
            t
            for _, values in client.query_range(f"resets({name}[{step:g}s]) > 0", a, b, step)
            for t, _ in values
        }
        for t in sorted(reset_at):
            for labels, values in client.query_range_samples(f"{name}[{step:g}s]", t):
                add(what, labels, values)
    for (what, series), pts in points.items():
        for t_ms, v in sorted(pts):
            grid.sample(what, series, t_ms, v)


def _step(t: float, dt: float, cls: str, g: dict[str, float]) -> Step:
    finding = ""
    if cls == "unknown" and g.get("down"):
        cls, finding = "down", "target_down"
    elif cls in LIMITS:
        finding = cls  # the limit findings are named after their class
    return Step(
        t,
        dt,
        cls,
        finding,
        kv=g.get("kv"),
        running=g.get("running"),
        waiting=g.get("waiting"),
        cap=g.get("cap_configured") or g.get("cap_inferred"),
        gen_tps=g.get("gen_tps"),
        itl_p50=g.get("itl_p50"),
        itl_baseline=g.get("itl_baseline"),
        preemptions_per_s=g.get("preemptions_per_s"),
    )
