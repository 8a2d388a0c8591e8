"""The what-if's simulated arrivals are bounded: a request counter ×10⁶ is refused at once (it ran past 40 s and
1.5 GB), ×100 is sampled over fewer seconds with a note, and real windows are simulated whole."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.whatif.model import Workload
from kvdoctor.whatif.predict import WARMUP_S, predict
from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.window import in_window
from kvdoctor.whatif.workload import (
    MAX_POPULATION,
    MAX_SIM_REQUESTS,
    WindowError,
    bound_duration,
    length_dist,
)

PAIRS = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif"
PAIR = next(p for p in json.loads((PAIRS / "pairs.json").read_text()) if p["name"] == "load_x1.5_healthy")
_SUCCESS = re.compile(r"^(vllm:request_success_total\{[^}]*\} )(\S+)", re.M)


def _window(factor: float):  # type: ignore[no-untyped-def]
    snaps = recording_snaps(PAIRS / PAIR["before"])
    for s in snaps:
        for k in s.flat:
            if k.startswith("vllm:request_success"):
                s.flat[k] *= factor
    lo, hi = PAIR["heavy_before"]
    return [s for s in snaps if s.t <= hi], in_window(snaps, lo, hi)


def _scaled_recording(tmp_path: Path, factor: float) -> Path:
    out = tmp_path / "scaled.jsonl"
    with gzip.open(PAIRS / PAIR["before"], "rt") as fh, out.open("w") as w:
        for line in fh:
            frame = json.loads(line)
            if frame.get("text"):
                frame["text"] = _SUCCESS.sub(
                    lambda m: f"{m.group(1)}{float(m.group(2)) * factor!r}", frame["text"]
                )
            w.write(json.dumps(frame) + "\n")
    return out


def _simulated(assumptions: list[str]) -> float:
    return float(
        next(
            re.match(r"simulated (\d+) s after", a).group(1)
            for a in assumptions
            if a.startswith("simulated ")
        )
    )  # type: ignore[union-attr]


def test_a_real_window_is_simulated_whole_without_a_note():
    history, window = _window(1.0)
    pred = predict(history, window, {})
    assert not any("to stay within" in a for a in pred.assumptions)
    assert pred.workload.rate_per_s * (_simulated(pred.assumptions) + WARMUP_S) < MAX_SIM_REQUESTS


def test_a_hundredfold_request_rate_is_sampled_over_fewer_seconds_with_a_note():
    history, window = _window(100.0)
    pred = predict(history, window, {"load": 1.5})
    note = next(a for a in pred.assumptions if "to stay within" in a)
    assert f"{MAX_SIM_REQUESTS} simulated requests" in note
    after_rate = pred.workload.rate_per_s * 1.5
    assert after_rate * (_simulated(pred.assumptions) + WARMUP_S) <= MAX_SIM_REQUESTS * 1.01


def test_a_millionfold_request_counter_is_refused_at_once_by_the_cli(tmp_path, capsys):
    rec = _scaled_recording(tmp_path, 1e6)
    lo, hi = PAIR["heavy_before"]
    t0 = recording_snaps(rec)[0].t
    assert main(["whatif", str(rec), "--window", f"{lo - t0:.0f}:{hi - t0:.0f}", "--set", "load=x1.5"]) == 2
    err = capsys.readouterr().err
    assert "requests/s per engine would need more than" in err and "request counter" in err
    assert "Traceback" not in err


def test_a_closed_loop_beyond_the_population_cap_is_refused():
    d = length_dist({10.0: 5.0, float("inf"): 5.0}, 8.0)
    w = Workload("closed", 1.0, MAX_POPULATION * 3, 0.0, d, d)
    with pytest.raises(WindowError, match="closed loop of"):
        bound_duration([(w, 2)], 120.0, WARMUP_S)
    assert bound_duration([(w, 3)], 120.0, WARMUP_S) == (120.0, None)  # its share per engine fits
