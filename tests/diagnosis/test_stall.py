"""A stalled engine is named (critical) with its likely cause; no limit is read off frozen gauges.

Built from a real vLLM 0.32 KV-bound recording: after 40 s of load the last busy scrape is served unchanged for
90 s, which is what the API server shows when the engine-core process stops (SIGSTOP): gauges frozen, counters
flat. The real recording of that (rec's `wedged` fixture) is judged by test_diagnosis_recordings.
"""

from __future__ import annotations

import re

import pytest

from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from tests.support import compose

BUSY_FROM, BUSY_S, FROZEN_S = 20, 40, 90


def _frozen(shared_032, tmp_path, waiting: float | None = None):
    frames = compose.frames(shared_032 / "kv_bound.jsonl.gz")[BUSY_FROM : BUSY_FROM + BUSY_S]
    t_last, text = frames[-1]
    if waiting is not None:  # the engine alive but stuck on one request: nothing runs, one waits
        text = re.sub(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", r"\1 0.0", text, flags=re.M)  # type: ignore[arg-type]
        text = re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) \S+$", rf"\1 {waiting}", text, flags=re.M)
    frozen = [(t_last + i, text) for i in range(1, FROZEN_S + 1)]
    return compose.write(tmp_path / "stall.jsonl", [*frames, *frozen]), t_last


def _run(path, cadence):
    pipeline = Pipeline(load_files(default_rule_files()))
    return [
        (c.t, d)
        for c in replay(pipeline, [path], interval_s=5.0, scrape_every_s=cadence)
        for d in c.diagnoses
    ]


@pytest.mark.parametrize("cadence", [0.0, 15.0], ids=["native", "scrape15s"])
def test_frozen_engine_is_stalled_within_a_minute_and_no_limit_is_read_off_it(shared_032, tmp_path, cadence):
    path, t_freeze = _frozen(shared_032, tmp_path)
    got = _run(path, cadence)
    stalled = [(t, d) for t, d in got if any(f.name == "stalled" for f in d.findings)]
    assert stalled, "stall never reported"
    first = stalled[0][0]
    # no token for ≥ 30 s (at a 15 s interval: across a whole interval, all two scrapes can show), within a minute
    flat = cadence or 30
    assert flat - 1 <= first - t_freeze <= 60, first - t_freeze
    assert not [t for t, _ in stalled if t < t_freeze + flat - 1]
    after = [d for t, d in got if t >= first]
    assert all(any(f.name == "stalled" for f in d.findings) for d in after)
    assert {d.bottleneck for d in after} == {"unknown"}
    f = next(f for f in after[-1].findings if f.name == "stalled")
    assert f.severity == "critical"
    assert f.evidence["gauges_frozen"] == "yes"
    assert f.evidence["running"] >= 1
    assert f.advice[0].flag == "engine" and "wedged engine" in f.advice[0].text


def test_a_request_the_cache_cannot_hold_is_the_first_cause_named(shared_032, tmp_path):
    path, _ = _frozen(shared_032, tmp_path, waiting=1.0)
    got = _run(path, 0.0)
    d = got[-1][1]
    f = next(f for f in d.findings if f.name == "stalled")
    assert f.evidence["running"] == 0 and f.evidence["waiting"] == 1
    assert f.evidence["kv_cache_tokens"] == 4096
    assert f.advice[0].flag == "--max-model-len"
    assert "4,096 tokens" in f.advice[0].text
