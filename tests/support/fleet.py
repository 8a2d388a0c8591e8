"""A multi-hour synthetic fleet from real vLLM scrapes: each hour replays a recording's steady window, re-timed.

Every synthetic scrape is a real frame; counters (and histogram buckets) advance by that frame's own real increment
over its predecessor in the recording, so they stay monotonic across window loops and recording switches. A
`restart` hour starts the counters from zero, as a restarted vLLM would. The generator keeps the true increments,
so a test can compute tokens and requests by hand.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from kvdoctor.ingest.recording import load_frames
from kvdoctor.pipeline import Cycle, Pipeline
from kvdoctor.report.collect import from_recordings
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.signals import recorded

ROOT = Path(__file__).resolve().parents[2]
# window name -> (directory, recording): "healthy" is the shared 0.32 one, "extra/kv_bound_mha" a committed fixture
DIRS = {
    "": ROOT / ".." / "shared" / "recordings" / "vllm-0.32-cpu",
    "extra": ROOT / "tests" / "fixtures" / "recordings" / "vllm-0.32-cpu-extra",
}
COUNTED = {
    "requests": "vllm:request_success_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
}


@dataclass
class Window:
    """The frames of one recording's steady window, with each frame's counter increments."""

    texts: list[str]
    counters: set[str]  # sample names of counters and histogram/summary parts
    increments: list[dict[str, float]]  # per frame: series line prefix -> real increment over its predecessor


@dataclass
class Target:
    """One synthetic target: its frames and the true per-scrape increments of the counted families."""

    name: str
    frames: list[tuple[float, str]] = field(default_factory=list)
    counted: list[tuple[float, dict[str, float]]] = field(default_factory=list)  # (t, family -> increment)


def _counter_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            if kind == "counter":
                names.add(name if name.endswith("_total") else name + "_total")
            elif kind in ("histogram", "summary"):
                names.update({name + "_bucket", name + "_count", name + "_sum"})
    return names


def _values(text: str, counters: set[str]) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        prefix, _, value = line.rpartition(" ")
        if prefix.split("{", 1)[0] in counters:
            out[prefix] = float(value)
    return out


def recording_path(name: str) -> Path:
    """The recording a window name refers to."""
    where, _, file = name.rpartition("/")
    return DIRS[where] / f"{file}.jsonl.gz"


def load_window(name: str) -> Window:
    """The first steady window (labels.json) of a recording, each frame with its real counter increments."""
    path = recording_path(name)
    lab = next(x for x in json.loads((path.parent / "labels.json").read_text()) if x["file"] == path.name)
    frames = [f for f in load_frames(path) if f.text is not None]
    counters = _counter_names(frames[0].text or "")
    texts, increments = [], []
    prev: dict[str, float] = {}
    for f in frames:
        values = _values(f.text or "", counters)
        if lab["steady_from"] <= f.t <= lab["steady_to"]:
            texts.append(f.text or "")
            inc = {k: (v - prev[k] if v >= prev.get(k, 0.0) else v) for k, v in values.items() if k in prev}
            increments.append(inc)
        prev = values
    return Window(texts, counters, increments)


def build_target(
    name: str,
    hours: list[str],
    start: float,
    scrape_s: float,
    restart_hour: int | None = None,
    model_name: str | None = None,
) -> Target:
    """Hour h replays window hours[h] scrape by scrape; counters accumulate the frames' real increments.

    model_name relabels the served model (two recorded engines both called their different models `tiny`).
    """
    windows = {w: load_window(w) for w in set(hours)}
    target = Target(name)
    totals: dict[str, float] = {}
    per_hour = round(3600 / scrape_s)
    for h, wname in enumerate(hours):
        w = windows[wname]
        if h == restart_hour:
            totals = {}
        for i in range(per_hour):
            t = start + h * 3600 + i * scrape_s
            k = i % len(w.texts)
            inc = w.increments[k] if (i or h) else {}
            for key, d in inc.items():
                totals[key] = totals.get(key, 0.0) + d
            text = _rewrite(w.texts[k], totals, w.counters)
            if model_name:
                text = re.sub(r'model_name="[^"]*"', f'model_name="{model_name}"', text)
            target.frames.append((t, text))
            target.counted.append((t, _family_sums(inc)))
    return target


def _family_sums(inc: dict[str, float]) -> dict[str, float]:
    out = dict.fromkeys(COUNTED, 0.0)
    for key, d in inc.items():
        for what, fam in COUNTED.items():
            if key.split("{", 1)[0] == fam:
                out[what] += d
    return out


def _rewrite(text: str, totals: dict[str, float], counters: set[str]) -> str:
    lines = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            prefix, _, _ = line.rpartition(" ")
            if prefix in totals:
                line = f"{prefix} {totals[prefix]!r}"
            elif prefix.split("{", 1)[0] in counters:
                line = f"{prefix} 0.0"  # not incremented yet in this synthetic life
        lines.append(line)
    return "\n".join(lines) + "\n"


def write_recording(target: Target, out_dir: Path) -> Path:
    """The target as a gzip JSON-lines recording named after it."""
    path = out_dir / f"{target.name}.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for t, text in target.frames:
            fh.write(json.dumps({"t": t, "text": text}) + "\n")
    return path


# The fleet the report tests share.
T0 = 1796000400.0  # Monday 2026-11-30 01:00 UTC
SCRAPE_S, STEP_S = 30.0, 60.0
HOURS = 6
# Nights idle, two busy hours; gpu-b is batch-capped at the peak, gpu-a restarts at the peak, gpu-c never serves,
# gpu-d (another model) fills its KV cache at the peak.
PLAN = {
    "gpu-a": (["idle", "idle", "healthy", "healthy", "idle", "idle"], 3, None),
    "gpu-b": (["idle", "idle", "healthy", "batch_cap", "idle", "idle"], None, None),
    "gpu-c": (["idle"] * HOURS, None, None),
    "gpu-d": (["extra/idle_mha"] * 3 + ["extra/kv_bound_mha"] + ["extra/idle_mha"] * 2, None, "tiny-mha"),
}
LAST_GRID = T0 + HOURS * 3600 - STEP_S  # the replay's last evaluation; scrapes after it are not counted


class Fleet:
    """The recordings of PLAN, their true increments, and the cycles and history of one replay of them."""

    def __init__(self, directory: Path) -> None:
        self.targets: dict[str, Target] = {
            name: build_target(name, hours, T0, SCRAPE_S, restart, model)
            for name, (hours, restart, model) in PLAN.items()
        }
        self.paths = [write_recording(t, directory) for t in self.targets.values()]
        self.cycles: list[Cycle] = []
        # what a Prometheus running the pack would hold: each cycle's recorded kvdoctor:* samples (by name)
        self.recorded: dict[str, dict[tuple[tuple[str, str], ...], list[tuple[int, float]]]] = {}
        self.pipeline = Pipeline(load_files(default_rule_files()))
        self.history = from_recordings(self.pipeline, self.paths, STEP_S, on_cycle=self._cycle)

    def _cycle(self, cycle: Cycle) -> None:
        self.cycles.append(cycle)
        t_ms = round(cycle.t * 1000)
        for name in set(recorded().values()):
            for s in self.pipeline.store.select(name):
                if s.ts and s.ts[-1] == t_ms and s.vs[-1] is not None:
                    labels = tuple((k, v) for k, v in s.labels if k != "__name__")
                    self.recorded.setdefault(name, {}).setdefault(labels, []).append((t_ms, s.vs[-1]))

    def write_pack_series(self, out: TextIO) -> None:
        """The recorded signals and the firing ALERTS of every cycle as OpenMetrics families (no `# EOF`)."""
        alerts: dict[tuple[tuple[str, str], ...], list[int]] = {}
        for c in self.cycles:
            for a in c.evaluation.alerts:
                if a.state == "firing":
                    labels = tuple(sorted({**a.labels, "alertname": a.rule, "alertstate": "firing"}.items()))
                    alerts.setdefault(labels, []).append(round(c.t * 1000))
        families = {**self.recorded, "ALERTS": {k: [(t, 1.0) for t in ts] for k, ts in alerts.items()}}
        for name, series in families.items():
            out.write(f"# TYPE {name} gauge\n")
            for labels, points in series.items():
                head = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"
                out.writelines(f"{head} {v!r} {t // 1000}.{t % 1000:03d}\n" for t, v in points)

    def hand(self, target: str, what: str, hour: int | None = None) -> float:
        """Increments by hand: a scrape's increment belongs to the evaluation step that ends at or after it."""
        total = 0.0
        for t, inc in self.targets[target].counted:
            if not T0 < t <= LAST_GRID:
                continue
            step_start = T0 + (math.ceil((t - T0) / STEP_S) - 1) * STEP_S
            if hour is None or int((step_start - T0) // 3600) == hour:
                total += inc[what]
        return total
