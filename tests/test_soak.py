"""Accelerated soak: hundreds of targets scraped for many retention periods keep memory and series bounded."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pytest

from kvdoctor.ingest.recording import load_frames
from kvdoctor.pipeline import Pipeline
from kvdoctor.rules.loader import default_rule_files, load_files

DEMO = Path(__file__).resolve().parents[1] / "kvdoctor" / "demo"
TARGETS = 200
INTERVAL = 15.0
RETENTION = 60.0  # 4 cycles; the run lasts 4 retention periods


@pytest.mark.slow
def test_memory_and_series_stay_bounded_with_hundreds_of_targets():
    frames = [f.text for f in load_frames(DEMO / "kv_bound.jsonl.gz") if f.text][40:100]
    pipeline = Pipeline(load_files(default_rule_files()), retention_s=RETENTION)
    t0 = 1_800_000_000.0
    sizes = {}
    tracemalloc.start()
    for cycle in range(16):
        t = t0 + cycle * INTERVAL
        for i in range(TARGETS):
            text = frames[(cycle + i) % len(frames)]
            # every 7th target restarts now and then (counter reset); every 11th is down for a while
            if i % 11 == 0 and 5 <= cycle < 8:
                pipeline.observe(f"t{i}", t, None, "connection refused")
            else:
                pipeline.observe(f"t{i}", t, frames[0] if i % 7 == 0 and cycle % 5 == 0 else text)
        if cycle % 4 != 3:
            continue  # evaluating every fourth cycle keeps the test short; scrapes are what fill memory
        diagnoses = pipeline.evaluate(t).diagnoses
        if cycle in (7, 15):
            pipeline.store.compact()
            gc.collect()
            sizes[cycle] = (
                tracemalloc.get_traced_memory()[0],
                len(pipeline.store),
                sum(len(s.ts) for s in pipeline.store.select(None)),
            )
    tracemalloc.stop()
    assert len({d.target for d in diagnoses}) == TARGETS
    (mem1, series1, _), (mem2, series2, samples2) = sizes[7], sizes[15]
    assert series2 <= series1 * 1.05
    per_series = samples2 / series2
    assert per_series <= RETENTION / INTERVAL + 3  # the window, not the whole run
    assert mem2 <= mem1 * 1.2, (mem1, mem2)
