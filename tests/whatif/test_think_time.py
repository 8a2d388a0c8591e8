"""A closed loop's think time: what the clients' cycle leaves beyond the time a request spends in the engine."""

from __future__ import annotations

from pathlib import Path

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
    assert (
        mean_of(a, b, "vllm:e2e_request_latency_seconds") < in_engine
    )  # the window's finished requests: biased
    assert w.kind == "closed" and w.population == 44
    assert abs(w.think_s - (w.population / rate - in_engine)) < 1e-9
    p = predict(history, window, {"load": 1.0})
    assert (
        p.unchanged.bottleneck == p.measured.bottleneck == "batch_cap"
    )  # e2e-based: 4 s of think, "compute"
    assert p.not_reproduced() == []
    assert p.unchanged.waiting > 0.4 * p.measured.waiting
