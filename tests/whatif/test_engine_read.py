"""What the what-if reads of the engine from its metrics alone, on recordings whose flags their notes give: the batch
cap from a plateau of running under a queue (as the rule pack reads it), and whether it is vLLM's V0 engine."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvdoctor.samples import Sample
from kvdoctor.whatif.compare import run_pair
from kvdoctor.whatif.plateau import load_shares, uneven
from kvdoctor.whatif.predict import predict
from kvdoctor.whatif.sources import default_window, recording_snaps
from kvdoctor.whatif.window import Snap, in_window, snapshot
from kvdoctor.whatif.workload import DEFAULT_MAX_NUM_SEQS, V0_NOTE, infer_engine

FIX = Path(__file__).parents[1] / "fixtures/recordings"


def _engine(name: str) -> tuple[int, list[str]]:
    snaps = recording_snaps(FIX / name)
    lo, hi = default_window(snaps, busy_period=True)
    engine, notes = infer_engine(in_window(snaps, lo, hi))
    return engine.max_num_seqs, notes


@pytest.mark.parametrize(
    ("name", "cap"),
    [
        # small caps read one below their peak in half the scrapes: a finished request's slot refills a step later
        ("vllm-0.32-cpu-whatif2/llama_cap_before.jsonl.gz", 8),  # pairs.json: --max-num-seqs 8, 16 waiting
        ("vllm-0.16-cpu-field/batch_cap.jsonl.gz", 4),  # labels.json: --max-num-seqs 4, 20 waiting
        ("vllm-0.32-cpu-margins/tiny_ramp_c8.jsonl.gz", 8),
    ],
)
def test_a_small_cap_under_a_queue_is_read_from_its_plateau(name: str, cap: int) -> None:
    got, notes = _engine(name)
    assert got == cap
    assert f"max_num_seqs {cap}: running held there while requests waited" in notes


@pytest.mark.parametrize(
    "name",
    [
        "vllm-0.32-cpu-whatif2/llama_cap_after.jsonl.gz",  # --max-num-seqs 24 under 24 clients: nothing waits
        "vllm-0.32-cpu-margins/tiny_kv_drain.jsonl.gz",  # a queue behind a full cache, not behind the cap
    ],
)
def test_no_plateau_where_the_cap_never_held_a_queue_back(name: str) -> None:
    got, notes = _engine(name)
    assert got == DEFAULT_MAX_NUM_SEQS
    assert any("no batch-cap plateau seen" in n for n in notes)


@pytest.mark.parametrize(
    ("name", "v0"),
    [
        ("vllm-0.8.5-cpu/kv_bound.jsonl.gz", True),  # labels.json: "V0 engine"
        ("vllm-0.8.5-cpu/healthy.jsonl.gz", True),
        ("vllm-0.10.2-cpu/kv_bound.jsonl.gz", False),  # V1, the first CPU release we have with it
        ("vllm-0.32-cpu-whatif2/tiny_prefix_after.jsonl.gz", False),  # V1, --no-enable-prefix-caching
    ],
)
def test_a_v0_engine_is_told_as_one_the_simulation_does_not_model(name: str, v0: bool) -> None:
    _, notes = _engine(name)
    assert (notes[0] == V0_NOTE) is v0 and (V0_NOTE in notes) is v0


def test_requests_deferred_for_a_lora_slot_are_no_batch_cap_and_are_said() -> None:
    # labels.json: running 11-12 of --max-num-seqs 128 while adapter c's 4 requests wait, all of them "deferred"
    got, notes = _engine("vllm-0.32-cpu-field/lora.jsonl.gz")
    assert got == DEFAULT_MAX_NUM_SEQS
    assert any(n.startswith("4 requests waited deferred on average (a LoRA adapter's slot") for n in notes)


def test_a_data_parallel_engine_pinned_at_its_cap_shows_the_cap_while_the_other_has_seats() -> None:
    # labels.json: --data-parallel-size 2 --max-num-seqs 4 (per engine); engine 0 runs 4 with 16 waiting, engine 1
    # runs 2 with none: the sum read as one cap over two engines was 3
    got, notes = _engine("vllm-0.32-cpu-field/dp2.jsonl.gz")
    assert got == 4
    said = next(n for n in notes if n.startswith("the engines carried the requests unevenly"))
    assert re.search(
        r"engine 0 (19|20)\.\d*, engine 1 [12]\.\d*\): each engine is simulated with its share of the load",
        said,
    )


def test_engines_sharing_the_load_evenly_are_not_called_uneven() -> None:
    snaps = recording_snaps(FIX / "vllm-0.32-cpu-field/dp2.jsonl.gz")
    # labels.json's balanced window: 6 clients without a rank header, 3 and 3 running
    _, notes = infer_engine(in_window(snaps, 1796117182.2, 1796117202.5))
    assert not any("unevenly" in n for n in notes)


def test_engines_carrying_uneven_shares_are_each_simulated_with_their_own() -> None:
    # labels.json: 20 clients pinned to engine 0 (running at its cap 4, 16 waiting), 2 to engine 1 (running 2)
    snaps = recording_snaps(FIX / "vllm-0.32-cpu-field/dp2.jsonl.gz")
    lo, hi = default_window(snaps, busy_period=True)
    window = in_window(snaps, lo, hi)
    p = predict([s for s in snaps if s.t <= hi], window, {"load": 1.0})
    assert p.workload.shares and max(p.workload.shares) > 0.85
    assert p.to_dict()["workload"]["engine_shares"] == [float(f"{x:.4g}") for x in p.workload.shares]
    got, measured = p.unchanged, p.measured
    assert (
        5.5 <= got.running <= 6.5 and abs(got.waiting - measured.waiting) <= 2
    )  # an even split ran 8 and 14
    assert 0.67 <= got.ttft_p50_s / measured.ttft_p50_s <= 1.5  # even: 3.9 s against 8.6 s measured
    assert got.bottleneck == "batch_cap"  # the loaded engine's limit, while the other has seats
    assert (
        measured.bottleneck == "batch_cap"
    )  # … and what was measured, read as the pack reads it (a Prometheus
    # source has no replay to name it; the sums alone, 5.8 running of 8 seats, read it as having room)
    even = predict(
        [s for s in snaps if s.t <= hi], window, {"replicas": 2}
    )  # today's engines, the load spread
    assert even.predicted.running > 7.5 and even.predicted.ttft_p50_s < 0.6 * got.ttft_p50_s


def test_past_eight_engines_uneven_shares_are_split_evenly_and_said_so() -> None:
    # each share is a simulation of its own: a target printing a thousand engine labels must not cost a thousand
    def scrape(t: float, engines: int) -> Snap:
        rows = []
        for e in range(engines):
            running, waiting = (4.0, 16.0) if e == 0 else (1.0, 0.0)
            rows += [
                Sample("vllm:num_requests_running", (("engine", str(e)),), running),
                Sample("vllm:num_requests_waiting", (("engine", str(e)),), waiting),
            ]
        return snapshot(t, rows)

    for engines, simulated_apart in ((8, True), (9, False)):
        window = [scrape(float(t), engines) for t in range(20)]
        assert bool(load_shares(window)) is simulated_apart
        said = uneven(window)
        assert said is not None and ("each engine is simulated with its share" in said) is simulated_apart


def test_a_router_s_uneven_shares_are_kept_through_a_change_as_a_real_server_kept_them() -> None:
    # vllm-0.32-cpu-dp (recorded after the shares were built): --max-num-seqs 4 -> 8 per engine with 20 of 22 clients
    # pinned to engine 0; the after server ran engine 0 at 8 with 12 waiting and engine 1 at 2
    directory = FIX / "vllm-0.32-cpu-dp"
    pair = json.loads((directory / "pairs.json").read_text())[0]
    result = run_pair(directory, pair)
    got, after = result.prediction, result.after
    assert abs(got.predicted.running - after.running) <= 1.5  # an even split predicts 16
    assert abs(got.predicted.waiting - after.waiting) <= 2.0  # … and 6
    assert 0.67 <= got.predicted.ttft_p50_s / after.ttft_p50_s <= 1.5  # … and a third of it
    assert got.predicted.bottleneck == "batch_cap"
