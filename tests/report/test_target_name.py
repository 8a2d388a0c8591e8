"""`report --target-name`: the target of recordings named on the command line, beside the NAME.target sidecar."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.ingest.recording import Frame, load_frames

SHORT = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif/batchcap_before.jsonl.gz"


def _report(*argv: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", *argv, "--format", "json", "--step", "5s"]) == 0
    return json.loads(out.getvalue())


def _write(path: Path, frames: list[Frame], shift: float = 0.0) -> str:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for f in frames:
            fh.write(json.dumps({"t": f.t + shift, "text": f.text}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One recording cut in two files 10 minutes apart (a, b), and another target's (c), over the same seconds."""
    tmp = tmp_path_factory.mktemp("names")
    frames = [f for f in load_frames(SHORT) if f.text]
    t0 = frames[0].t
    a = [f for f in frames if f.t - t0 <= 30]
    b = [f for f in frames if 50 <= f.t - t0 <= 80]
    return {
        "a": _write(tmp / "part-a.jsonl.gz", a),
        "b": _write(tmp / "part-b.jsonl.gz", b, shift=600.0),
        "c": _write(tmp / "other.jsonl.gz", a),
    }


def _hours(frames_path: str) -> float:
    fr = load_frames(frames_path)
    return (fr[-1].t - fr[0].t) / 3600


def test_one_name_for_all_recordings_makes_them_one_target(parts: dict[str, str]) -> None:
    doc = _report(parts["a"], parts["b"], "--target-name", "vllm-0:8000", "--gpu-hour-cost", "2")
    (entry,) = doc["targets"]
    assert entry["target"] == "vllm-0:8000"
    # charged the two files' own spans, not the 10 minutes between them
    assert entry["gpu_hours"] == pytest.approx(_hours(parts["a"]) + _hours(parts["b"]), abs=2 * 5.5 / 3600)
    assert entry["cost_usd"] == pytest.approx(2 * entry["gpu_hours"], abs=0.01)


def test_file_names_pick_the_recordings_and_the_rest_keep_their_own(
    parts: dict[str, str], tmp_path: Path
) -> None:
    # c's sidecar says "sidecar:1", the flag overrides it; a and b are named one by one
    Path(parts["c"]).with_name("other.target").write_text("sidecar:1\n")
    try:
        doc = _report(
            parts["a"],
            parts["b"],
            parts["c"],
            "--target-name",
            f"{parts['a']}=vllm-0:8000",
            "--target-name",
            f"{parts['b']}=vllm-0:8000",
            "--target-name",
            f"{parts['c']}=vllm-1:8000",
        )
        assert {e["target"] for e in doc["targets"]} == {"vllm-0:8000", "vllm-1:8000"}
        doc = _report(parts["a"], parts["c"], "--target-name", f"{parts['a']}=vllm-0:8000")
        assert {e["target"] for e in doc["targets"]} == {"vllm-0:8000", "sidecar:1"}
    finally:
        Path(parts["c"]).with_name("other.target").unlink()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--target-name", "nowhere.jsonl.gz=x"], "'nowhere.jsonl.gz' is not one of the recordings given"),
        (["--target-name", "a", "--target-name", "b"], "a name for all recordings was given already (a)"),
        (["--target-name", "has space"], "expected a target name without spaces"),
        (["--target-name", "{a}=x", "--target-name", "{a}=y"], "was named x already"),
    ],
)
def test_bad_names_are_errors_naming_the_flag(
    parts: dict[str, str], flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = [f.format(a=parts["a"]) for f in flags]
    assert main(["report", parts["a"], *flags]) == 2
    err = capsys.readouterr().err
    assert "--target-name" in err and message in err


def test_the_flag_needs_recordings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--prometheus-url", "http://127.0.0.1:9", "--target-name", "x"]) == 2
    assert "--target-name names the target of recordings" in capsys.readouterr().err
