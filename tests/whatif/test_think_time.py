"""A closed loop's think time: what the clients' cycle leaves beyond the time a request spends in the engine."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvdoctor.whatif.predict import predict
from kvdoctor.whatif.sources import default_window, history_before, recording_snaps
from kvdoctor.whatif.window import delta, mean_of
from kvdoctor.whatif.workload import infer_workload

RAMPS = Path(__file__).resolve().parents[1] / "fixtures" / "recordings" / "vllm-0.32-cpu-ramps"


def test_an_e2e_mean_shorter_than_the_stay_in_the_engine_does_not_become_think_time() -> None:
    # the ramp's last step: 44 clients (the load generator's cap) at a 32-seat server, a queue, steps that cancel
    snaps = recording_snaps(RAMPS / "tiny_ramp_c32.jsonl.gz")
    lo, hi = default_window(snaps, busy_period=True)
    history, window = history_before(snaps, lo, hi)
    w = infer_workload(window)
    a, b = window[0], window[-1]
    rate = delta(a, b, "vllm:request_success_total") / (b.t - a.t)
    inside = sum(
        s.get("vllm:num_requests_running", 0.0) + s.get("vllm:num_requests_waiting", 0.0) for s in window
    )
    in_engine = inside / len(window) / rate  # Little's law on running + waiting
    # the e2e mean of the requests that finished in the window is biased short
    assert mean_of(a, b, "vllm:e2e_request_latency_seconds") < in_engine
    assert w.kind == "closed" and w.population == 44
    assert abs(w.think_s - (w.population / rate - in_engine)) < 1e-9
    p = predict(history, window, {"load": 1.0})
    # read through the e2e mean: 4 s of think time, 0.9 waiting and "compute"
    assert p.unchanged.bottleneck == p.measured.bottleneck == "batch_cap"
    assert p.not_reproduced() == []
    assert p.unchanged.waiting > 0.4 * p.measured.waiting


def test_a_server_without_an_e2e_histogram_gets_its_think_time_from_the_stay_in_the_engine() -> None:
    snaps = recording_snaps(RAMPS / "tiny_ramp_c32.jsonl.gz")
    lo, hi = default_window(snaps, busy_period=True)
    _, window = history_before(snaps, lo, hi)
    e2e = "vllm:e2e_request_latency_seconds"
    bare = [
        replace(
            s,
            flat={k: v for k, v in s.flat.items() if not k.startswith(e2e)},
            buckets={k: v for k, v in s.buckets.items() if not k.startswith(e2e)},
        )
        for s in window
    ]
    with_e2e, without = infer_workload(window), infer_workload(bare)
    assert without.kind == "closed" and without.population == with_e2e.population
    # the e2e mean was the shorter there: the stay in the engine decided both
    assert without.think_s == pytest.approx(with_e2e.think_s)
    assert without.think_s > 0
