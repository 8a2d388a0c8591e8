"""A DaemonState filled with real diagnoses: recordings replayed side by side, plus a target that is down."""

from __future__ import annotations

import functools
import time
from dataclasses import replace

from kvdoctor.diagnosis.target import Target, TargetFacts
from kvdoctor.pipeline import Pipeline
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.status.state import DaemonState
from kvdoctor.verdicts import Diagnosis
from tests.conftest import SHARED
from tests.support.replays import replayed as replayed_once

RECORDINGS = SHARED / "vllm-0.32-cpu"
INTERVAL = 15.0
DOWN = "vllm-down"
DOWN_ERROR = "GET http://10.0.0.7:8000/metrics: connection refused"


@functools.cache
def replayed(name: str) -> tuple[tuple[Diagnosis, ...], ...]:
    """The diagnoses of every cycle of one recording (replayed once for the whole suite: tests.support.replays)."""
    return tuple(c.diagnoses for c in replayed_once(RECORDINGS / f"{name}.jsonl.gz", interval_s=INTERVAL))


def _shift(d: Diagnosis, off: float) -> Diagnosis:
    findings = [replace(f, since=None if f.since is None else f.since + off) for f in d.findings]
    return replace(d, t=d.t + off, since=d.since + off, findings=findings)


def build_state(
    names: tuple[str, ...] = ("kv_bound", "batch_cap", "healthy"), down: bool = True
) -> DaemonState:
    """Publish the recordings' cycles as if one daemon watched them all, ending now."""
    cycles = {n: replayed(n) for n in names}
    end = time.time()
    steps = max(len(c) for c in cycles.values())
    state = DaemonState()
    down_pipeline = Pipeline(load_files(default_rule_files()))
    down_pipeline.add_target(DOWN)
    for k in range(steps):
        t = end - INTERVAL * (steps - 1 - k)
        published: list[Diagnosis] = []
        for cs in cycles.values():
            j = len(cs) - (steps - k)
            if j >= 0:
                published += [_shift(d, t - d.t) for d in cs[j]]
        if down:
            down_pipeline.observe(DOWN, t, None, DOWN_ERROR)
            published += down_pipeline.evaluate(t).diagnoses
        state.publish(published, t, 0.012, 0)
    for i, n in enumerate(names):
        url = f"http://127.0.0.1:{8001 + i}/metrics"
        state.set_target(Target(n, TargetFacts(url=url), True, "", 0, end, 0.021))
    if down:
        state.set_target(
            Target(
                DOWN, TargetFacts(url="http://10.0.0.7:8000/metrics"), False, DOWN_ERROR, 20, end - 300, 2.0
            )
        )
    return state
