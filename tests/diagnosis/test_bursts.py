"""Bursts: a limit begins and ends within a minute of the load, one incident per burst, none across an idle minute.

Two KV-bound bursts of a real vLLM 0.32 recording with an idle minute between them: the recording's own idle tail
is served for 60 s, then the recording again with its counters continued from the first burst (the same server
later, not a restart), then its idle tail again for 60 s.
"""

from __future__ import annotations

import json

import pytest

from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from tests.support import compose
from tests.support.timeline import LIMITS, WITHIN_S, incidents, onset_s, resolution_s, timeline

IDLE_S = 60


def _bursts(shared_032, tmp_path):
    frames = compose.frames(shared_032 / "kv_bound.jsonl.gz")
    client = json.loads((shared_032 / "kv_bound.client.json").read_text())
    t0, t_end = frames[0][0], frames[-1][0]
    idle = [(t_end + i, frames[-1][1]) for i in range(1, IDLE_S + 1)]
    shift = idle[-1][0] + 1 - t0
    offsets = compose.counters(frames[-1][1])  # type: ignore[arg-type]
    second = [(t + shift, compose.continue_counters(x, offsets)) for t, x in frames]  # type: ignore[arg-type]
    tail = [(second[-1][0] + i, second[-1][1]) for i in range(1, IDLE_S + 1)]
    loads = [
        (client["load_start"], client["load_end"]),
        (client["load_start"] + shift, client["load_end"] + shift),
    ]
    return compose.write(tmp_path / "bursts.jsonl", [*frames, *idle, *second, *tail]), loads


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
@pytest.mark.parametrize("cadence", [0.0, 15.0], ids=["native", "scrape15s"])
def test_each_burst_is_one_incident_begun_and_ended_within_a_minute(shared_032, tmp_path, cadence):
    path, loads = _bursts(shared_032, tmp_path)
    tl = timeline(
        replay(Pipeline(load_files(default_rule_files())), [path], interval_s=5.0, scrape_every_s=cadence)
    )
    for i, (start, end) in enumerate(loads):
        until = loads[i + 1][0] if i + 1 < len(loads) else None
        on, off = onset_s(tl, "kv_cache", start), resolution_s(tl, "kv_cache", end, until)
        assert on is not None and on <= WITHIN_S, (i, on)
        assert off is not None and off <= WITHIN_S, (i, off)
        assert incidents(tl, "kv_cache", start, end + WITHIN_S) == 1, i
    first_end, second_start = loads[0][1], loads[1][0]
    between = [cls for t, cls, _ in tl if first_end + WITHIN_S <= t < second_start]
    assert between and not LIMITS & set(between), between
    assert between[-1] == "idle"
