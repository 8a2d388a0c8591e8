"""Convert recorded vLLM scrapes into OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`."""

# Expositions are parsed with prometheus_client: an oracle independent of kvdoctor's own parser.

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

# (path, instance, time shift in seconds), as kvdoctor.query.load_store takes them
Recording = tuple[str, str, float]
LabelKey = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, LabelKey]  # (sample name, sorted labels without __name__)

_OM_TYPES = {"counter", "gauge", "histogram", "summary", "unknown"}


def read_frames(path: str | Path) -> Iterator[tuple[float, str]]:
    """Yield (t, exposition text) for each successful scrape of a recording; failed scrapes are skipped."""
    p = Path(path)
    with p.open("rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    with gzip.open(p, "rt", encoding="utf-8") if gz else p.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            obj = json.loads(line)
            if "error" in obj or not isinstance(obj.get("text"), str):
                continue
            yield float(obj["t"]), obj["text"]


def to_ms(t: float, shift: float = 0.0) -> int:
    """Millisecond timestamp of a recorded scrape time after a shift, as both sides must compute it."""
    return round((t + shift) * 1000)


def format_ts(t_ms: int) -> str:
    """Seconds with exactly three decimals."""
    return f"{t_ms // 1000}.{t_ms % 1000:03d}"


def format_value(v: float) -> str:
    """A float in exposition syntax (NaN, +Inf, -Inf, else repr)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_series(name: str, labels: LabelKey) -> str:
    """`name{a="b",...}` with OpenMetrics escaping."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


@dataclass
class Family:
    """One metric family across all recordings: its type and per-series (t_ms, value) points."""

    name: str
    type: str
    series: dict[SeriesKey, list[tuple[int, float]]] = field(default_factory=dict)


@dataclass
class Dataset:
    """Everything parsed from a set of recordings, keyed by family name."""

    families: dict[str, Family] = field(default_factory=dict)
    min_ms: int | None = None
    max_ms: int | None = None
    scrapes: dict[str, list[int]] = field(default_factory=dict)  # instance -> scrape times (ms)

    def points(self, sample_name: str) -> dict[LabelKey, list[tuple[int, float]]]:
        """All series of one sample name (e.g. `vllm:num_requests_running`), labels -> points."""
        out: dict[LabelKey, list[tuple[int, float]]] = {}
        for fam in self.families.values():
            for (name, labels), pts in fam.series.items():
                if name == sample_name:
                    out[labels] = pts
        return out

    def sample_count(self) -> int:
        """Total number of samples."""
        return sum(len(p) for f in self.families.values() for p in f.series.values())


def _om_type(family_type: str, sample_names: Iterable[str], name: str) -> str:
    if family_type == "counter" and not all(s == name + "_total" for s in sample_names):
        return "unknown"  # a counter without `_total` samples is not valid OpenMetrics
    return family_type if family_type in _OM_TYPES else "unknown"


def parse_recordings(
    recordings: Iterable[Recording], *, job: str = "vllm", keep: Callable[[str], bool] | None = None
) -> Dataset:
    """Parse recordings in order; a repeated instance is appended in time and must not overlap its past."""
    data = Dataset()
    for path, instance, shift in recordings:
        times = data.scrapes.setdefault(instance, [])
        for t, text in read_frames(path):
            t_ms = to_ms(t, shift)
            if times and t_ms <= times[-1]:
                raise ValueError(
                    f"{path}: scrape at {format_ts(t_ms)} not after {instance}'s previous scrape"
                )
            times.append(t_ms)
            data.min_ms = t_ms if data.min_ms is None else min(data.min_ms, t_ms)
            data.max_ms = t_ms if data.max_ms is None else max(data.max_ms, t_ms)
            for mf in text_string_to_metric_families(text):
                if mf.name.endswith("_created") or (keep is not None and not keep(mf.name)):
                    continue
                fam = data.families.setdefault(mf.name, Family(mf.name, mf.type))
                if fam.type != mf.type:
                    raise ValueError(f"{path}: {mf.name} is {mf.type} here, {fam.type} before")
                for s in mf.samples:
                    if s.name.endswith("_created"):
                        continue
                    labels = dict(s.labels, instance=instance, job=job)
                    key = (s.name, tuple(sorted(labels.items())))
                    fam.series.setdefault(key, []).append((t_ms, float(s.value)))
    return data


def write_openmetrics(data: Dataset, out: str | Path) -> int:
    """Write the dataset as one OpenMetrics file (each family contiguous, `# EOF` last); returns lines written."""
    n = 0
    with Path(out).open("w", encoding="utf-8") as fh:
        for fam in data.families.values():
            if not fam.series:
                continue
            om_type = _om_type(fam.type, (name for name, _ in fam.series), fam.name)
            fh.write(f"# TYPE {fam.name} {om_type}\n")
            for (name, labels), pts in fam.series.items():
                prefix = format_series(name, labels)
                fh.writelines(f"{prefix} {format_value(v)} {format_ts(t)}\n" for t, v in pts)
                n += len(pts)
        fh.write("# EOF\n")
    return n


def recordings_to_openmetrics(
    recordings: Iterable[Recording],
    out: str | Path,
    *,
    job: str = "vllm",
    keep: Callable[[str], bool] | None = None,
) -> Dataset:
    """Parse recordings and write them as OpenMetrics to `out`; returns the parsed dataset."""
    data = parse_recordings(recordings, job=job, keep=keep)
    write_openmetrics(data, out)
    return data
