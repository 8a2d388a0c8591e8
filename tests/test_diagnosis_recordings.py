"""On every labelled window of real vLLM recordings, the diagnosis carries the labelled class.

Run at the recordings' own 1 s cadence and thinned to a 15 s scrape interval, the interval operators run at.
"""

from __future__ import annotations

import pytest

from doctor.ingest.recording import load_frames
from doctor.pipeline import Pipeline
from doctor.replay import replay
from doctor.rules.loader import default_rule_files, load_files
from tests.conftest import labelled_windows

WINDOWS = labelled_windows()
LIMITS = {"kv_cache", "batch_cap", "compute"}


def _classes(path, entry, interval_s: float, scrape_every_s: float) -> list[str]:
    pipeline = Pipeline(load_files(default_rule_files()))
    # A verdict needs a window (two scrapes at least 15 s apart): right after the recording starts, or after the
    # server was down, kvdoctor says `unknown`; those evaluations are not judged (test_no_verdict_from_one_scrape).
    frames = load_frames(path)
    warm = max(2 * scrape_every_s, 15.0 + max(scrape_every_s, 1.0)) + 0.5
    restarts = [frames[0].t] + [f.t for f in frames if f.text is None] + _gauges_appear(frames)
    got = []
    for cycle in replay(pipeline, [path], interval_s=interval_s, scrape_every_s=scrape_every_s):
        if any(0 <= cycle.t - r < warm for r in restarts):
            continue
        if entry["steady_from"] - 0.5 <= cycle.t <= entry["steady_to"] + 0.5:
            got += [d.bottleneck for d in cycle.diagnoses if d.model_name]
    return got


def _gauges_appear(frames) -> list[float]:
    # V0 (0.8.5) exports its scheduler gauges only from its first stats log on: the window starts there
    out, seen = [], False
    for f in frames:
        has = f.text is not None and "vllm:num_requests_running{" in f.text
        if has and not seen:
            out.append(f.t)
        seen = has
    return out


@pytest.mark.parametrize("cadence", [0.0, 15.0], ids=["native", "scrape15s"])
@pytest.mark.parametrize(
    "entry", WINDOWS, ids=[f"{w['dir']}/{w['file']}:{w['expected']}@{w['steady_from']:.0f}" for w in WINDOWS]
)
def test_labelled_window_gets_its_class(entry, cadence):
    got = _classes(entry["path"], entry, interval_s=5.0, scrape_every_s=cadence)
    if not got:
        pytest.skip("window shorter than one evaluation at this cadence")
    share = got.count(entry["expected"]) / len(got)
    assert share >= 0.9, f"{entry['expected']}: {share:.0%} of {got}"
    if entry["expected"] in ("healthy", "idle"):
        assert not LIMITS & set(got), got


def test_there_are_labelled_windows_of_every_class():
    if not WINDOWS:
        pytest.skip("no recordings available")
    assert {"idle", "healthy", "kv_cache", "batch_cap", "compute"} <= {w["expected"] for w in WINDOWS}
