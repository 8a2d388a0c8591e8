"""Recordings whose clock steps back or jumps are refused with file:line (sorting them gave fake counter resets),
and `replay-server --loop` serves frames that all share one time."""

from __future__ import annotations

import gzip
import json
import urllib.request
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.ingest.recording import RecordingError, load_frames
from kvdoctor.replayserver import Playlist, ReplayServer
from tests.support.clock import ManualClock

DEMO = Path(__file__).resolve().parents[1] / "kvdoctor" / "demo" / "kv_bound.jsonl.gz"


def _write(path: Path, frames: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(f) + "\n" for f in frames))
    return path


def _demo_frames() -> list[dict[str, object]]:
    with gzip.open(DEMO, "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_two_runs_appended_into_one_file_are_refused_at_the_step_back(tmp_path, capsys):
    frames = _demo_frames()[:120]
    # the second run's clock starts 60 s before the first one ended: sorted, its counters interleave with the
    # first run's and every interleaving looks like a counter reset
    second = [{**f, "t": float(f["t"]) - 60} for f in frames[60:]]  # type: ignore[arg-type]
    rec = _write(tmp_path / "appended.jsonl", frames + second)
    with pytest.raises(
        RecordingError, match=r"appended\.jsonl:121: time steps back \d+(\.\d+)? s from line 120"
    ):
        load_frames(rec)
    assert main(["replay", str(rec)]) == 2
    err = capsys.readouterr().err
    assert "appended.jsonl:121: time steps back" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("t", "why"),
    [
        (1e10, "jumps"),
        (1e12, "not a unix time"),
        (float("inf"), "not a unix time"),
        (-5.0, "not a unix time"),
    ],
)
def test_an_absurd_timestamp_is_refused_naming_the_line(tmp_path, t, why):
    frames = _demo_frames()[:10]
    frames[5] = {**frames[5], "t": t}
    if t == float("inf"):
        text = "".join(json.dumps(f) + "\n" for f in frames).replace("Infinity", "1e999")
        rec = tmp_path / "bad.jsonl"
        rec.write_text(text)
    else:
        rec = _write(tmp_path / "bad.jsonl", frames)
    with pytest.raises(RecordingError, match=rf"bad\.jsonl:6: .*{why}"):
        load_frames(rec)


def test_a_frame_with_an_infinite_sample_timestamp_is_a_bad_scrape_not_a_crash(tmp_path, capsys):
    frames = _demo_frames()[:30]
    frames[10] = {**frames[10], "text": str(frames[10]["text"]) + "vllm:extra 1 Inf\n"}
    rec = _write(tmp_path / "inf.jsonl", frames)
    t = float(frames[20]["t"])  # type: ignore[arg-type]
    assert main(["query", str(rec), "vllm:num_requests_running", "--time", str(t), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"]


def test_replay_server_loops_over_frames_that_share_one_time(tmp_path):
    frames = [{"t": 1700000000.0, "text": f"a {i}\n"} for i in range(3)]
    clock = ManualClock(0.0)
    server = ReplayServer(
        Playlist([_write(tmp_path / "one_t.jsonl", frames)], loop=True), clock=clock
    ).start()
    try:
        bodies = []
        for _ in range(3):
            with urllib.request.urlopen(server.url, timeout=5) as resp:
                bodies.append(resp.read().decode())
            clock.advance(0.7)
    finally:
        server.stop()
    assert bodies == ["a 2\n"] * 3  # the last frame of the instant, on every turn of the loop
