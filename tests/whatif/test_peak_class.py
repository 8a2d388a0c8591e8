"""A load that rose into a limit is judged where it met it: the busiest part of its window, on both sides."""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.whatif.model import Engine, LengthDist, StepModel, Workload
from kvdoctor.whatif.plateau import plateau
from kvdoctor.whatif.readout import verdict
from kvdoctor.whatif.sim import Simulator
from kvdoctor.whatif.window import Quantities, Snap, light_itl

RISING = Path(__file__).resolve().parents[1] / "fixtures" / "recordings" / "vllm-0.32-cpu-rising"
ONE = LengthDist(((50.0, 100.0, 1.0),), 75.0)


def _whatif_json(
    capsys: pytest.CaptureFixture[str],
    name: str,
    *flags: str,
    side: str = "before",
    change: str = "max_num_seqs=16",
) -> dict:
    """`kvdoctor whatif --json` on the heavy window of one side of a rising pair."""
    pair = next(p for p in json.loads((RISING / "pairs.json").read_text()) if p["name"] == name)
    path = RISING / pair[side]
    with gzip.open(path, "rt") as f:
        t0 = json.loads(f.readline())["t"]
    lo, hi = (t - t0 for t in pair[f"heavy_{side}"])
    argv = ["whatif", str(path), "--window", f"{lo}:{hi}", "--set", change, "--json", *flags]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_a_ramp_that_reached_the_cap_late_reads_batch_cap_at_its_peak_and_the_raised_cap_clears_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # rising_cap_steep: arrivals 1 -> 12 req/s at 8 seats; only the last stretch ran at the cap with a queue
    doc = _whatif_json(capsys, "rising_cap_steep")  # no --max-num-seqs: the cap is read from that stretch
    assert any(a.startswith("max_num_seqs 8: running held there") for a in doc["assumptions"])
    assert any("limit is judged at the window's busiest part" in a for a in doc["assumptions"])
    assert doc["measured"]["bottleneck"] == "batch_cap"  # what the daemon said while the ramp topped out
    assert doc["predicted_unchanged"]["bottleneck"] == "batch_cap"
    assert doc["predicted"]["bottleneck"] == "healthy"  # 16 seats, as the after recording showed
    # on the window's means the ramp reads healthy: 5.4 running of 8, the queue half the time
    assert doc["measured"]["running"] < 0.9 * 8


def test_a_ramp_that_stayed_under_the_cap_reads_healthy_at_its_peak(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = _whatif_json(capsys, "rising_cap", "--max-num-seqs", "8")  # 0.5 -> 6 req/s: eight seats were enough
    assert doc["workload"]["arrival_profile"]
    assert doc["measured"]["bottleneck"] == doc["predicted_unchanged"]["bottleneck"] == "healthy"
    assert doc["predicted"]["bottleneck"] == "healthy"


def test_the_simulation_records_its_busiest_part_on_its_own_and_a_level_load_has_none() -> None:
    engine = Engine(8, 2048, 4000, 16, 4096)
    step = StepModel(0.004, 0.001, 0.00002)
    shaped = Workload("open", 4.0, 0, 0.0, ONE, ONE, profile=(0.5, 0.5, 1.0, 2.0))
    res = Simulator(engine, step).run_workload(shaped, 200.0, 30.0, seed=3)
    assert res.peak is not None and res.peak.span_s == pytest.approx(50.0)
    assert (
        res.peak.finished / res.peak.span_s > 1.5 * res.finished / res.span_s
    )  # twice the mean rate arrives
    assert res.peak.running_area / res.peak.span_s > res.running_area / res.span_s
    level = Simulator(engine, step).run_workload(Workload("open", 4.0, 0, 0.0, ONE, ONE), 200.0, 30.0, seed=3)
    assert level.peak is None


def _snaps(running: list[float], waiting: list[float], every_s: float = 2.0) -> list[Snap]:
    return [
        Snap(
            i * every_s,
            {"vllm:num_requests_running": r, "vllm:num_requests_waiting": w, "vllm:kv_cache_usage_perc": 0.1},
        )
        for i, (r, w) in enumerate(zip(running, waiting, strict=True))
    ]


def test_a_cap_reached_for_the_last_stretch_of_a_window_is_read_and_a_brief_one_is_not() -> None:
    ramp = [min(8.0, 1.0 + i / 5) for i in range(40)]  # 1 -> 8 running over 80 s, no queue
    held = _snaps([*ramp, *[8.0] * 15], [*[0.0] * 40, *[3.0] * 15])  # then 30 s at 8 with 3 waiting
    assert plateau(held) == 8
    brief = _snaps([*ramp, *[8.0] * 4], [*[0.0] * 40, *[3.0] * 4])  # 6 s of it: a burst, not a cap
    assert plateau(brief) is None
    wandering = _snaps([*ramp, *[5.0, 7.0, 6.0] * 5], [*[0.0] * 40, *[3.0] * 15])  # waited, never pinned
    assert plateau(wandering) is None


def test_on_a_second_model_recorded_after_the_cap_and_the_classes_at_the_peak_are_read_as_the_daemon_read_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # llama_rising_cap (session 17, set aside): 0.5 -> 3.5 req/s; 8 seats queued from halfway, 16 held the top
    before = _whatif_json(capsys, "llama_rising_cap")
    assert any(a.startswith("max_num_seqs 8: running held there") for a in before["assumptions"])
    assert before["measured"]["bottleneck"] == before["predicted_unchanged"]["bottleneck"] == "batch_cap"
    after = _whatif_json(capsys, "llama_rising_cap", side="after", change="max_num_seqs=8")
    assert after["measured"]["bottleneck"] == after["predicted_unchanged"]["bottleneck"] == "healthy"


def test_a_busy_burst_at_the_peak_of_a_rising_load_is_not_called_compute(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # field/busy, labelled healthy: a rising open loop whose top reaches 57 running, ITL growing with the batch as it
    # should. Its busiest 20 s, read alone, would pass the compute threshold; the pack judges compute on a minute
    path = (
        Path(__file__).resolve().parents[1]
        / "fixtures"
        / "recordings"
        / "vllm-0.32-cpu-field"
        / "busy.jsonl.gz"
    )
    assert main(["whatif", str(path), "--set", "load=x1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["workload"]["arrival_profile"]
    assert doc["measured"]["bottleneck"] == doc["predicted_unchanged"]["bottleneck"] == "healthy"


def _itl_snaps(phases: list[tuple[int, float, float]]) -> list[Snap]:
    """Scrapes every 2 s; each phase (scrapes, running, waiting) adds 20 ITL observations a scrape, at 10-25 ms while
    at most 2 run and at 25-50 ms above."""
    out, fast, slow, t = [], 0.0, 0.0, 0.0
    for n, running, waiting in phases:
        for _ in range(n):
            if running <= 2:
                fast += 20
            else:
                slow += 20
            itl = {0.01: 0.0, 0.025: fast, 0.05: fast + slow, math.inf: fast + slow}
            flat = {"vllm:num_requests_running": running, "vllm:num_requests_waiting": waiting}
            out.append(Snap(t, flat, {"vllm:inter_token_latency_seconds": itl}))
            t += 2.0
    return out


def test_the_light_load_baseline_is_read_as_the_pack_reads_it_and_absent_without_a_light_minute() -> None:
    light_then_busy = _itl_snaps([(40, 1.0, 0.0), (40, 12.0, 0.0)])  # 80 s at one request, then a batch of 12
    assert light_itl(light_then_busy) == pytest.approx(0.0175)  # the middle of the 10-25 ms bucket
    between = _itl_snaps([(40, 12.0, 0.0), (20, 1.0, 0.0), (40, 12.0, 0.0)])  # 40 s of light load: no minute
    assert light_itl(between) is None
    # at the start of the scrapes a minute holds those there are, as Prometheus' range does: 40 s of light load
    assert light_itl(_itl_snaps([(20, 1.0, 0.0), (60, 12.0, 0.0)])) == pytest.approx(0.0175)
    assert light_itl(_itl_snaps([(6, 1.0, 0.0), (60, 12.0, 0.0)])) is None  # 10 s: not yet a window
    queued = _itl_snaps([(40, 2.0, 1.0), (40, 12.0, 0.0)])  # two running with one waiting is not light load
    assert light_itl(queued) is None


def test_without_a_baseline_compute_is_named_as_the_packs_cold_start_does() -> None:
    engine = Engine(64, 2048, 4000, 16, 4096)
    q = Quantities(
        itl_p50_s=0.04, running=20.0, waiting=0.0, requests_per_s=5.0, kv_usage_max=0.1, preemptions_per_s=0.0
    )
    assert verdict(q, engine, 0.005) == "compute"  # 8x a 5 ms light load at a batch of 20
    assert verdict(q, engine, None) == "healthy"  # no baseline: only an ITL past 50 ms is compute
    assert verdict(replace(q, itl_p50_s=0.06), engine, None) == "compute"
    assert verdict(replace(q, itl_p50_s=0.06, running=3.0), engine, None) == "healthy"  # not a real batch
