"""History from recordings: the replay pipeline on their own clock, counters counted from every raw sample.

Tokens and requests are counter increases between consecutive raw samples of each series, with Prometheus' reset
rule (a lower value means the counter restarted from zero, so the new value is the increase), without
extrapolation; each increase belongs to the evaluation step whose interval (t_i, t_i+1] holds its sample. A
Prometheus source reads the same raw samples through range selectors, so both give the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from kvdoctor.pipeline import Cycle, Pipeline
from kvdoctor.replay import replay
from kvdoctor.report.history import History, Key
from kvdoctor.report.steps import Step, step_from_diagnosis

COUNTERS = {
    "requests": "vllm:request_success_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
}
LabelSet = tuple[tuple[str, str], ...]
GAP_S = 300.0  # Prometheus' lookback: a target unheard of for longer was not watched in between


def key_of(labels: LabelSet | dict[str, str]) -> Key:
    """(instance, model_name) of a counter series."""
    d = dict(labels)
    return d.get("instance", ""), d.get("model_name", "")


class Grid:
    """Steps on a grid start + i·step, and the counter increases that fall in each; `history()` accounts them."""

    def __init__(self, source: str, start: float, step: float) -> None:
        self.source = source
        self.start_ms, self.step_ms = round(start * 1000), round(step * 1000)
        self.last_ms = self.start_ms  # samples after the last grid point belong to no step yet
        self.steps: dict[int, dict[Key, Step]] = {}
        self.counted: dict[tuple[int, Key], dict[str, float]] = {}
        self._prev: dict[tuple[str, LabelSet], tuple[int, float]] = {}
        self.watched: dict[str, list[list[float]]] | None = (
            None  # target → [first, last] stretches of its `up`
        )

    def seen(self, target: str, t: float) -> None:
        """One `up` sample (a scrape, failed or not) of a target: it was watched at t."""
        if self.watched is None:
            self.watched = {}
        stretches = self.watched.setdefault(target, [])
        if stretches and 0 < t - stretches[-1][1] <= GAP_S:
            last = stretches[-1]
            last[1], last[2] = t, t - last[1]  # the last scrape vouches for one interval after it
        elif not stretches or t - stretches[-1][1] > GAP_S:
            stretches.append([t, t, 0.0])

    def _clip(self, target: str, step: Step, first: bool) -> Step | None:
        """The step cut to the stretches its target was watched in (None outside them); no `up` of it: as is.

        A target's first diagnosis comes at the first evaluation after its first scrape, so its first step also
        takes the watched time of the step before it.
        """
        if self.watched is None:
            return step
        lo, hi = step.t - (step.dt if first else 0.0), step.t + step.dt
        stretches = self.watched.get(target)
        if not stretches:
            return step
        final, step_s = self.last_ms / 1000, self.step_ms / 1000
        # scrapes after the final evaluation are never fed: a target still watched then keeps the final step whole
        spans = [(a, final + step_s if final - b <= gap + 1e-6 else b + gap) for a, b, gap in stretches]
        parts = [(max(lo, a), min(hi, b)) for a, b in spans if min(hi, b) > max(lo, a)]
        if not parts:
            return None
        step.t, step.dt = parts[0][0], sum(b - a for a, b in parts)
        return step

    def index(self, t: float) -> int:
        """The grid index of an evaluation time."""
        return round((t * 1000 - self.start_ms) / self.step_ms)

    def point(self, t: float, steps: dict[Key, Step]) -> None:
        """The steps evaluated at grid time t."""
        self.steps[self.index(t)] = steps
        self.last_ms = max(self.last_ms, round(t * 1000))

    def sample(self, what: str, labels: LabelSet, t_ms: int, v: float) -> None:
        """One raw counter sample (repeats and samples older than the series' last one are ignored)."""
        sk = (what, labels)
        prev = self._prev.get(sk)
        if math.isnan(v) or (prev is not None and t_ms <= prev[0]):
            return
        self._prev[sk] = (t_ms, v)
        if prev is None:
            return  # the first sample is the baseline
        inc = v if v < prev[1] else v - prev[1]
        i = (t_ms - self.start_ms - 1) // self.step_ms
        if i >= 0 and t_ms <= self.last_ms:
            d = self.counted.setdefault((i, key_of(labels)), {})
            d[what] = d.get(what, 0.0) + inc

    def history(self) -> History:
        """Every step, in time order, with the increases counted in it."""
        h = History(self.source)
        began: dict[str, int] = {}  # target -> the step of its first diagnosis
        for i in sorted(self.steps):
            for key, whole in self.steps[i].items():
                # the time before a target's first diagnosis is its first step's, once: a model name that shows
                # later (metrics missing at start-up) is the same replica, whose time was already counted
                step = self._clip(key[0], whole, began.get(key[0], i) == i)
                if step is None:
                    continue  # a recording's target is charged only the span it was recorded over
                began.setdefault(key[0], i)
                first = h.resolve(*key) not in h.keys  # its counters' increases before this step are its own
                inc = dict(self.counted.get((i, key), {}))
                for what, v in (self.counted.get((i - 1, key), {}) if first else {}).items():
                    inc[what] = inc.get(what, 0.0) + v
                step.requests += inc.get("requests", 0.0)
                step.prompt_tokens += inc.get("prompt_tokens", 0.0)
                step.generation_tokens += inc.get("generation_tokens", 0.0)
                h.add(key[0], key[1], step)
        return h


def _feed(grid: Grid, pipeline: Pipeline, since_ms: int, t_ms: int) -> None:
    for s in pipeline.store.select("up"):
        instance = dict(s.labels).get("instance", "")
        for sample_t in s.window(since_ms, t_ms)[0]:
            grid.seen(instance, sample_t / 1000)
    for what, name in COUNTERS.items():
        for s in pipeline.store.select(name):
            labels = tuple((k, x) for k, x in s.labels if k != "__name__")
            ts, vs = s.window(since_ms, t_ms)
            for sample_t, v in zip(ts, vs, strict=True):
                grid.sample(what, labels, sample_t, v)


def from_recordings(
    pipeline: Pipeline,
    recordings: Iterable[str | Path],
    step_s: float = 60.0,
    on_cycle: Callable[[Cycle], None] | None = None,
    names: Mapping[str, str] | None = None,
) -> History:
    """Replay the recordings, one evaluation every step_s, into a History (`names`: target names by path)."""
    paths = list(recordings)
    pipeline.also_store(set(COUNTERS.values()))  # _feed reads them from the store
    grid: Grid | None = None
    fed_ms = -(2**62)
    for cycle in replay(pipeline, paths, interval_s=step_s, on_cycle=on_cycle, names=names):
        grid = grid or Grid(f"{len(paths)} recording(s)", cycle.t, step_s)
        steps = {(d.target, d.model_name): step_from_diagnosis(d, cycle.t, step_s) for d in cycle.diagnoses}
        grid.point(cycle.t, steps)
        t_ms = round(cycle.t * 1000)
        _feed(grid, pipeline, fed_ms + 1, t_ms)
        fed_ms = t_ms
    return grid.history() if grid else History(f"{len(paths)} recording(s)")
