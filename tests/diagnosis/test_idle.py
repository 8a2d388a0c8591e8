"""Idle means no traffic for idle_after (30 s by default), whatever the scrape interval; a lull is healthy until then.

Light loads (open loop 1-2 req/s, one closed-loop worker) have lulls of many seconds with nothing in flight; at 1 s
scrapes those used to be called idle. Judged on real recordings thinned to 1, 5, 15 and 30 s scrapes.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import pytest

from kvdoctor.config import ConfigError, load_config
from kvdoctor.ingest.recording import load_frames
from kvdoctor.pipeline import IDLE_AFTER_S
from tests.conftest import labelled_windows
from tests.support.replays import replayed
from tests.support.timeline import LIMITS, Timeline, timeline

CADENCES = pytest.mark.parametrize("cadence", [1.0, 5.0, 15.0, 30.0], ids=["1s", "5s", "15s", "30s"])
WINDOW_S = 15.0  # no verdict before two scrapes this far apart (kvdoctor:window:ready)
# Light loads with lulls: open loop at 1 and 2 req/s (V0 and V1), one closed-loop worker with long prompts, open loop
# 1 req/s with a shared prefix (running 0 in most scrapes).
LIGHT = {
    ("vllm-0.8.5-cpu", "healthy_rate1.jsonl.gz"),
    ("vllm-0.8.5-cpu", "healthy.jsonl.gz"),
    ("vllm-0.32-cpu-field", "longprompt.jsonl.gz"),
    ("vllm-0.32-cpu-field", "prefix_head.jsonl.gz"),
    ("vllm-0.32-cpu", "healthy.jsonl.gz"),
    ("vllm-0.10.2-cpu", "healthy.jsonl.gz"),
}
WINDOWS = labelled_windows()
LIGHT_WINDOWS = [w for w in WINDOWS if (w["dir"], w["file"]) in LIGHT and w["expected"] == "healthy"]
# and the light open-loop phases (0.1-0.4 req/s) that open the ramps on two model shapes (head_dim 64 and 128)
LIGHT_WINDOWS += [
    w for w in WINDOWS if w["dir"] == "vllm-0.32-cpu-margins" and w["notes"].startswith("light")
]
BURSTS = [w for w in WINDOWS if w["file"] == "bursts.jsonl.gz" and w["expected"] == "idle"]


@cache
def _replay(
    path: Path, cadence: float, idle_after_s: float = IDLE_AFTER_S, until: float = math.inf
) -> Timeline:
    return timeline(replayed(path, cadence, idle_after_s=idle_after_s, until=until))


@cache
def _first_t(path: Path) -> float:
    return load_frames(path)[0].t


def _in(entry: dict, cadence: float, lo: float, hi: float) -> list[str]:
    first = _first_t(entry["path"])
    warm = first + max(2 * cadence, WINDOW_S + cadence) + 0.5
    # replayed up to hi only: the light windows open 10-minute ramps (the evaluations before hi are the same)
    return [cls for t, cls, _ in _replay(entry["path"], cadence, until=hi) if max(lo, warm) <= t <= hi]


@CADENCES
@pytest.mark.parametrize("entry", LIGHT_WINDOWS, ids=[f"{w['dir']}/{w['file']}" for w in LIGHT_WINDOWS])
def test_light_traffic_is_not_idle(entry, cadence):
    got = _in(entry, cadence, entry["steady_from"] - 0.5, entry["steady_to"] + 0.5)
    if not got:
        pytest.skip("window shorter than one evaluation at this cadence")
    assert got.count("idle") / len(got) <= 0.1, got
    assert not LIMITS & set(got), got


def test_the_light_windows_are_there():
    if not any(w["dir"] == "vllm-0.8.5-cpu" for w in LIGHT_WINDOWS):
        pytest.skip("no recordings")
    assert len(LIGHT_WINDOWS) >= 5


@CADENCES
@pytest.mark.parametrize("entry", BURSTS, ids=["bursts-gap"])
def test_a_lull_after_a_limit_is_healthy_until_idle_after_then_idle(entry, cadence):
    # the first burst's limit ends once a lull has lasted 10 s (kvdoctor:requests:max10s), the 60 s gap is idle
    # once 30 s have passed without a token; in between it is healthy (at 30 s scrapes, one cycle shows it)
    end = entry["load_start"]
    lull = _in(entry, cadence, end + 15.5, end + IDLE_AFTER_S - 0.5)
    assert "idle" not in lull and not LIMITS & set(lull), lull
    assert cadence >= 30 or (lull and set(lull) == {"healthy"}), lull
    # idle_after past the first scrape that saw the last token, and a cycle (the gap ends 60 s after the burst)
    idle = _in(
        entry, cadence, min(end + IDLE_AFTER_S + cadence + 5.5, entry["load_end"] - 1), entry["load_end"]
    )
    assert idle and set(idle) == {"idle"}, idle


@pytest.mark.parametrize("entry", BURSTS, ids=["bursts-gap"])
def test_idle_after_is_what_the_pipeline_is_told(entry):
    end = entry["load_start"]
    tl = _replay(entry["path"], 1.0, 10.0)
    early = [cls for t, cls, _ in tl if end + 17 <= t <= entry["load_end"]]
    assert early and set(early) == {"idle"}, early
    tl = _replay(entry["path"], 1.0, 120.0)
    gap = [cls for t, cls, _ in tl if end + 15 <= t <= entry["load_end"]]
    assert gap and "idle" not in gap and not LIMITS & set(gap), gap


def test_idle_after_is_a_config_duration(tmp_path):
    p = tmp_path / "kvdoctor.yml"
    p.write_text("interval: 15s\nidle_after: 2m\n")
    assert load_config(str(p)).idle_after_s == 120.0
    assert load_config(None).idle_after_s == IDLE_AFTER_S
    p.write_text("interval: 15s\nidle_after: soon\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(p))
    assert f"{p}:2" in str(exc.value) and "idle_after" in str(exc.value)
