"""Past saturation the what-if says "overloaded" with the capacity, not a TTFT that grows with the time simulated.

The open-loop pair was recorded on the server of the batch-capped pair without its `--max-num-seqs 4`: with that cap
set back (`--set max_num_seqs=4`) the open-loop traffic runs into the capacity the batch-capped window measured.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.ingest.parse import parse
from kvdoctor.ingest.recording import read_recording
from kvdoctor.verdicts import Advice, Diagnosis
from kvdoctor.whatif import knobs
from kvdoctor.whatif.advisor import Advisor
from kvdoctor.whatif.plan import Planner
from kvdoctor.whatif.predict import learn, simulate
from kvdoctor.whatif.saturation import detect
from kvdoctor.whatif.sources import default_window, history_before, recording_snaps
from kvdoctor.whatif.window import in_window, measure
from tests.support.whatif_json import SATURATION_KEYS

PAIRS = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif"
OPEN = PAIRS / "loadx15_before.jsonl.gz"  # open loop, Poisson 4 req/s, out 32-128 tokens, healthy
CAPPED = PAIRS / "loadcap_before.jsonl.gz"  # the same server with --max-num-seqs 4, 16 clients: at its cap
# Outputs differ between the two recordings (32-128 vs 64-256 tokens), so the open-loop traffic spends a larger
# share of each step on prefill: its decode capacity in tokens/s is expected somewhat below the capped window's.
CAPACITY_TOLERANCE = 0.25


def _whatif(capsys: pytest.CaptureFixture[str], *changes: str) -> dict:
    argv = ["whatif", str(OPEN), "--json"]
    for c in changes:
        argv += ["--set", c]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _capped_throughput() -> float:
    """Generation tokens/s the batch-capped window measured in its heavy phase (20 waiting, 4 running)."""
    pairs = json.loads((PAIRS / "pairs.json").read_text())
    lo, hi = next(p for p in pairs if p["before"] == CAPPED.name)["heavy_before"]
    return measure(in_window(recording_snaps(CAPPED), lo, hi)).generation_tokens_per_s


def test_three_times_the_arrivals_at_the_cap_is_overloaded_with_the_capped_windows_capacity(capsys):
    doc = _whatif(capsys, "max_num_seqs=4", "load=x3")
    after, now = doc["predicted"], doc["predicted_unchanged"]
    assert set(after) >= SATURATION_KEYS and set(now) >= SATURATION_KEYS
    assert after["overloaded"] is True and now["overloaded"] is False
    arrivals, capacity = after["arrivals_requests_per_s"], after["capacity_requests_per_s"]
    assert arrivals == pytest.approx(3 * doc["workload"]["requests_per_s"], rel=0.01)
    assert 0 < capacity < arrivals
    assert after["queue_growth_requests_per_s"] == pytest.approx(arrivals - capacity, rel=0.01)
    measured = _capped_throughput()
    assert after["capacity_generation_tokens_per_s"] == pytest.approx(measured, rel=CAPACITY_TOLERANCE)
    assert after["capacity_requests_per_s_per_replica"] == pytest.approx(capacity, rel=0.01)
    # a request a minute later finds (growth × 60) more requests ahead, served at the capacity
    per_min = 60 * after["queue_growth_requests_per_s"] / capacity
    assert after["ttft_growth_s_per_minute"] == pytest.approx(per_min, rel=0.01)
    assert after["ttft_reaches_after_s"] == pytest.approx(after["ttft_reaches_s"] / (per_min / 60), rel=0.01)
    assert {"ttft_p50_s", "ttft_p95_s", "queue_time_p95_s"} <= set(after["duration_dependent"])


def test_half_the_arrivals_at_the_cap_is_not_overloaded_and_keeps_a_steady_ttft(capsys):
    doc = _whatif(capsys, "max_num_seqs=4", "load=x0.5")
    after = doc["predicted"]
    assert after["overloaded"] is False and after["duration_dependent"] == []
    assert after["capacity_requests_per_s"] is None and after["queue_growth_requests_per_s"] is None
    assert after["ttft_p95_s"] < 1.0  # the queue stays short: a TTFT that holds


def test_the_text_says_overloaded_with_arrivals_capacity_and_growth(capsys):
    assert main(["whatif", str(OPEN), "--set", "max_num_seqs=4", "--set", "load=x3"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("after overloaded:"))
    assert "req/s > capacity" in line and "the queue grows" in line and "per minute while it lasts" in line
    ttft = next(x for x in out.splitlines() if x.startswith("TTFT p95"))
    assert ttft.endswith("(grows)")  # the after column: no steady value
    assert "unchanged overloaded" not in out


def test_the_capacity_does_not_depend_on_the_time_simulated_where_the_ttft_does():
    snaps = recording_snaps(OPEN)
    lo, hi = default_window(snaps)
    basis = learn(*history_before(snaps, lo, hi), max_num_seqs=4)
    engine, w, n, _ = knobs.apply(basis.engine, basis.workload, 1, {"load": 3.0}, basis.info)
    runs = [simulate(engine, basis.step, w, n, d, 0) for d in (60.0, 180.0)]
    short, long = (detect(r, w, n) for r in runs)
    assert short is not None and long is not None
    assert long.capacity_requests_per_s == pytest.approx(short.capacity_requests_per_s, rel=0.05)
    assert long.queue_growth_per_s == pytest.approx(short.queue_growth_per_s, rel=0.1)
    assert max(runs[1].ttft) > 2 * max(runs[0].ttft)  # what a single TTFT number would have depended on


def test_plan_treats_an_overloaded_candidate_as_breaking_even_a_generous_slo():
    snaps = recording_snaps(OPEN)
    lo, hi = default_window(snaps)
    basis = learn(*history_before(snaps, lo, hi), max_num_seqs=4)
    planner = Planner(basis, {"ttft_p95_s": 1000.0})  # above any TTFT the short simulation reaches
    over = planner.evaluate({}, 1, 3.0)
    assert over.predicted.overload is not None
    assert not over.meets and over.margins == {"ttft_p95_s": None}
    assert (
        over.predicted.value("ttft_p95_s") or 0
    ) < 1000.0  # the duration-dependent number alone would have passed
    calm = planner.evaluate({}, 1, 0.5)
    assert calm.meets and calm.predicted.overload is None
    # today's cap breaks the objective where the arrivals pass the capacity, not beyond ×8
    capacity = over.predicted.overload.capacity_requests_per_s
    assert planner.headroom("ttft_p95_s") == pytest.approx(capacity / basis.workload.rate_per_s, rel=0.15)


def test_advice_past_saturation_says_overloaded_instead_of_a_ttft():
    advisor = Advisor()
    frames = [f for f in read_recording(OPEN) if f.text is not None]
    for f in frames:
        advisor.observe("vllm-0", f.t, parse(f.text).samples)
    t = frames[-1].t
    change: dict[str, float | str] = {"max_num_seqs": 4, "load": 3.0}
    d = Diagnosis("vllm-0", "tiny", t, "healthy", t, advice=[Advice("--max-num-seqs", "cap", change=change)])
    eff = advisor.annotate([d], t)[0].advice[0].effect
    assert eff is not None
    assert eff.after["ttft_p95_s"] is None and eff.after["queue_time_p95_s"] is None
    assert eff.now["ttft_p95_s"] is not None  # today's side is not overloaded: its TTFT holds
    text = eff.summary()
    assert "after overloaded: arrivals" in text and "capacity" in text and "TTFT +" in text
    assert "TTFT p95" not in text and eff.text == text


def test_plan_text_says_overloaded_for_todays_flags_at_three_times_the_arrivals(capsys):
    argv = ["plan", str(OPEN), "--max-num-seqs", "4", "--slo", "ttft_p95=2s", "--load", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    today = out[out.index("today's configuration at load ×3:") + 1]
    assert "overloaded (capacity" in today and "breaks" in today and "ttft_p95" not in today
    pick = next(x for x in out if x.startswith("plan: "))
    assert "margins ttft_p95 +" in pick  # the pick holds the objective: it is not an overloaded candidate
