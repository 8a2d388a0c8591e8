"""Replayed diagnoses as OpenMetrics text, for `promtool tsdb create-blocks-from openmetrics`.

Every cycle is published into a fresh DaemonState and collected through the live DiagnosisCollector, so the
names, labels and types are exactly those `kvdoctor serve` exposes on /metrics; each sample is stamped with the
cycle's evaluation time. Backfilled blocks carry no staleness markers: a series that stops (a finding that
resolves) stays visible for Prometheus' lookback (5 m) after its last sample, where a live scrape would end it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TextIO

from kvdoctor.diagnosis.target import Target, TargetFacts
from kvdoctor.pipeline import Cycle
from kvdoctor.status.exposition import DiagnosisCollector
from kvdoctor.status.state import DaemonState

LabelKey = tuple[tuple[str, str], ...]
# OpenMetrics family types; prometheus_client's "untyped" is OpenMetrics' "unknown".
_TYPES = {"counter", "gauge", "histogram", "gaugehistogram", "summary", "info", "stateset", "unknown"}


@dataclass
class _Family:
    name: str
    type: str
    help: str
    series: dict[tuple[str, LabelKey], list[tuple[int, float]]] = field(default_factory=dict)


def format_timestamp(t_ms: int) -> str:
    """Unix seconds with exactly three decimals, from milliseconds."""
    sign = "-" if t_ms < 0 else ""
    t_ms = abs(t_ms)
    return f"{sign}{t_ms // 1000}.{t_ms % 1000:03d}"


def format_value(v: float) -> str:
    """A float in OpenMetrics syntax (NaN, +Inf, -Inf, else repr)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _series(name: str, labels: LabelKey) -> str:
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


class _Targets:
    """Scrape health per target as the daemon would have recorded it, derived from the diagnoses."""

    def __init__(self, urls: dict[str, str]) -> None:
        self.urls = urls
        self.errors: dict[str, int] = {}
        self.last_ok: dict[str, float] = {}

    def update(self, state: DaemonState, cycle: Cycle) -> None:
        """Set each target's scrape stats in state from what the cycle's diagnoses say about it."""
        down: dict[str, bool] = {}
        for d in cycle.diagnoses:
            is_down = any(f.name == "target_down" for f in d.findings)
            down[d.target] = down.get(d.target, False) or is_down
        for name, is_down in sorted(down.items()):
            if is_down:
                self.errors[name] = self.errors.get(name, 0) + 1
            else:
                self.last_ok[name] = cycle.t
            state.set_target(
                Target(
                    name,
                    TargetFacts(url=self.urls.get(name, "")),
                    up=not is_down,
                    last_success_ts=self.last_ok.get(name),
                    errors_total=self.errors.get(name, 0),
                )
            )


def _timed(cycles: Iterable[Cycle]) -> Iterator[tuple[Cycle, float]]:
    """Each cycle with the wall time spent producing it (the replay's evaluation duration)."""
    it = iter(cycles)
    while True:
        started = time.perf_counter()
        try:
            cycle = next(it)
        except StopIteration:
            return
        yield cycle, time.perf_counter() - started


def collect_families(
    cycles: Iterable[Cycle],
    target_urls: dict[str, str] | None = None,
    extra_labels: dict[str, str] | None = None,
) -> list[_Family]:
    """Publish each cycle into a DaemonState and gather every exposed sample, stamped with the cycle's time."""
    state = DaemonState(history_points=1)
    collector = DiagnosisCollector(state)
    targets = _Targets(target_urls or {})
    extra = dict(extra_labels or {})
    families: dict[str, _Family] = {}
    for cycle, duration in _timed(cycles):
        targets.update(state, cycle)
        state.publish(cycle.diagnoses, cycle.t, duration, cycle.evaluation.failed_rules())
        t_ms = round(cycle.t * 1000)
        for mf in collector.collect():
            fam = families.get(mf.name)
            if fam is None:
                om_type = mf.type if mf.type in _TYPES else "unknown"
                fam = families[mf.name] = _Family(mf.name, om_type, mf.documentation)
            for s in mf.samples:
                key = (s.name, tuple(sorted({**s.labels, **extra}.items())))
                points = fam.series.setdefault(key, [])
                if points and points[-1][0] >= t_ms:
                    raise ValueError(f"cycle at {format_timestamp(t_ms)} is not after the previous one")
                points.append((t_ms, float(s.value)))
    return [f for f in families.values() if f.series]


def write_families(families: list[_Family], out: TextIO) -> int:
    """Write families contiguously, each series' points in time order, then `# EOF`; returns samples written."""
    n = 0
    for fam in families:
        out.write(f"# TYPE {fam.name} {fam.type}\n")
        if fam.help:
            out.write(f"# HELP {fam.name} {_escape(fam.help)}\n")
        for (name, labels), points in fam.series.items():
            prefix = _series(name, labels)
            out.writelines(f"{prefix} {format_value(v)} {format_timestamp(t)}\n" for t, v in points)
            n += len(points)
    out.write("# EOF\n")
    return n


def export_openmetrics(
    cycles: Iterable[Cycle],
    out: TextIO,
    target_urls: dict[str, str] | None = None,
    *,
    extra_labels: dict[str, str] | None = None,
) -> int:
    """Write the kvdoctor_* series exposed at each cycle as timestamped OpenMetrics; returns the sample count."""
    return write_families(collect_families(cycles, target_urls, extra_labels), out)
