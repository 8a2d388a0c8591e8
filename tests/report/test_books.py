"""The capacity review's books: each target is charged the hours it was watched, never the report's whole range."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.ingest.recording import Frame, load_frames

PAIRS = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif"
SHORT, LATER = PAIRS / "batchcap_before.jsonl.gz", PAIRS / "kv2x_before.jsonl.gz"


def _report(*argv: str, fmt: str = "json") -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", *argv, "--format", fmt]) == 0
    return out.getvalue()


def _json(*argv: str) -> dict:  # type: ignore[type-arg]
    return json.loads(_report(*argv))


def _span_h(frames: list[Frame]) -> float:
    return (frames[-1].t - frames[0].t) / 3600


def _write(path: Path, frames: list[Frame], shift: float = 0.0) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for f in frames:
            fh.write(
                json.dumps(
                    {"t": f.t + shift, "text": f.text} if f.text else {"t": f.t + shift, "error": f.error}
                )
            )
            fh.write("\n")


def test_recordings_of_different_spans_are_each_charged_only_their_own_hours():
    doc = _json(str(SHORT), str(LATER), "--gpu-hour-cost", "2", "--step", "5s")
    by = {e["target"]: e for e in doc["targets"]}
    for path in (SHORT, LATER):
        e, own = by[path.name.removesuffix(".jsonl.gz")], _span_h(load_frames(path))
        # within one 5 s step of the recording's own span; the range is more than three times the short one's
        assert e["hours"]["total"] == pytest.approx(own, abs=5.5 / 3600)
        assert e["gpu_hours"] == e["hours"]["total"] and e["cost_usd"] == round(2 * e["gpu_hours"], 2)
        assert e["cost_per_1m_generation_tokens_usd"] == pytest.approx(
            e["cost_usd"] / e["generation_tokens"] * 1e6, rel=0.02
        )
    assert doc["range"]["hours"] > 3 * _span_h(load_frames(SHORT))
    assert by["batchcap_before"]["hours"]["unknown"] < 0.5 * by["batchcap_before"]["hours"]["total"]


def test_an_autoscaled_fleet_is_billed_for_the_replicas_that_ran(tmp_path):
    """r1 runs throughout; r2 appears after 20 s and vanishes at 60 s; r3 is two files 10 minutes apart."""
    frames = [f for f in load_frames(SHORT) if f.text]
    t0 = frames[0].t
    part = {
        n: [f for f in frames if lo <= f.t - t0 <= hi]
        for n, (lo, hi) in {"r1": (0, 80), "r2": (20, 60), "r3a": (0, 30), "r3b": (50, 80)}.items()
    }
    _write(tmp_path / "r1.jsonl.gz", part["r1"])
    _write(tmp_path / "r2.jsonl.gz", part["r2"])
    _write(tmp_path / "r3a.jsonl.gz", part["r3a"])
    _write(tmp_path / "r3b.jsonl.gz", part["r3b"], shift=600.0)  # scraped again 10 minutes later
    for f in ("r3a", "r3b"):
        (tmp_path / f"{f}.target").write_text("r3:8000\n")
    doc = _json(
        *(str(tmp_path / f"{n}.jsonl.gz") for n in ("r1", "r2", "r3a", "r3b")),
        "--gpu-hour-cost",
        "3",
        "--gpus-per-target",
        "2",
        "--step",
        "5s",
    )
    by = {e["target"]: e for e in doc["targets"]}
    assert set(by) == {"r1", "r2", "r3:8000"}  # the two r3 files are one target, named by their sidecar
    # by hand: the seconds between each file's first and last scrape, in GPU-hours at 2 GPUs per replica
    watched = {
        "r1": _span_h(part["r1"]),
        "r2": _span_h(part["r2"]),
        "r3:8000": _span_h(part["r3a"]) + _span_h(part["r3b"]),
    }
    for name, hours in watched.items():
        assert by[name]["gpu_hours"] == pytest.approx(2 * hours, abs=2 * 5.5 / 3600), name
        assert by[name]["cost_usd"] == pytest.approx(3 * by[name]["gpu_hours"], abs=0.01)
    assert doc["range"]["hours"] > 0.18  # the range spans the 10-minute gap …
    assert doc["fleet"]["gpu_hours"] == pytest.approx(2 * sum(watched.values()), abs=3 * 2 * 5.5 / 3600)
    assert doc["fleet"]["gpu_hours"] < 0.2 * 2 * 3 * doc["range"]["hours"]  # … which nobody is billed for


def test_an_empty_sidecar_is_an_error_naming_it(tmp_path, capsys):
    _write(tmp_path / "a.jsonl.gz", load_frames(SHORT)[:5])
    (tmp_path / "a.target").write_text("\n")
    assert main(["report", str(tmp_path / "a.jsonl.gz")]) == 2
    assert f"{tmp_path / 'a.target'}:1: expected one line" in capsys.readouterr().err


def test_with_an_slo_the_report_adds_what_the_plans_configuration_would_have_cost():
    argv = (str(SHORT), "--gpu-hour-cost", "2", "--slo", "ttft_p95=2s")
    doc = _json(*argv)
    pl = doc["planned"]
    assert pl["slos"] == {"ttft_p95_s": 2.0}
    (row,) = pl["targets"]
    assert row["target"] == "batchcap_before" and row["feasible"]
    assert row["paid_gpu_hours"] == doc["targets"][0]["gpu_hours"]
    # the batch-capped server missed 2 s: the plan lifts the cap (or adds replicas) for its traffic
    assert row["changes"].get("max_num_seqs", 4) > 4 or any(h["replicas"] > 1 for h in row["hourly"])
    by_hand = sum(h["replicas"] * h["hours"] for h in row["hourly"])
    assert row["replica_hours"] == pytest.approx(by_hand, abs=1e-4)
    assert row["cost_usd"] == pytest.approx(2 * row["gpu_hours"], abs=0.01)
    md = _report(*argv, fmt="md")
    assert "## Planned for ttft_p95 ≤ 2 s" in md and "| batchcap_before | --max-num-seqs" in md


def test_slo_on_a_prometheus_report_is_refused(capsys):
    assert main(["report", "--prometheus-url", "http://127.0.0.1:9", "--slo", "ttft_p95=2s"]) == 2
    assert "--slo" in capsys.readouterr().err


OLD = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.8.5-cpu"


@pytest.mark.parametrize("name", ["batch_cap", "restart", "idle"])
def test_a_server_that_showed_its_model_name_late_is_one_replica_billed_once(name):
    # vLLM 0.8.5 exports only its cache config until the engine is up, so its first scrapes carry no model name:
    # that time is the same replica's, not a second one beside it
    rec = OLD / f"{name}.jsonl.gz"
    frames = load_frames(str(rec))
    assert "model_name" not in frames[0].text and any("model_name" in f.text for f in frames)
    doc = _json(str(rec), "--gpu-hour-cost", "2", "--step", "5s")
    (entry,) = doc["targets"]
    assert entry["model_name"] == "tiny" and doc["fleet"]["replicas"] == 1
    assert entry["hours"]["total"] == pytest.approx(_span_h(frames), abs=5.5 / 3600)
    assert doc["fleet"]["gpu_hours"] == entry["gpu_hours"] == entry["hours"]["total"]


def test_an_idle_server_gets_its_idle_hours_and_their_cost_not_an_error():
    rec = OLD / "idle.jsonl.gz"
    doc = _json(str(rec), "--gpu-hour-cost", "2")
    fleet = doc["fleet"]
    assert fleet["requests"] == 0 and fleet["generation_tokens"] == 0
    assert fleet["hours"]["idle"] > 0.5 * fleet["hours"]["total"] and fleet["cost_usd"] > 0
    assert fleet["cost_per_1m_generation_tokens_usd"] is None  # nothing served: no price per token
    md = _report(str(rec), "--gpu-hour-cost", "2", fmt="md")
    assert "100 % of the hours had no traffic" in md and "None" not in md
