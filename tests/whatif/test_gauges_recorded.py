"""vLLM's running gauge on a real server: a request is not counted in the step that admits it.

The simulation reads its running and waiting the same way (tests/whatif/test_sim.py); this holds the premise to a
recording of vLLM 0.32 under long prompts and short answers, where the two readings differ by a factor.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from kvdoctor.whatif.predict import predict
from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.window import delta, in_window, mean_of

FOLDER = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-gauges"
STEADY = (46.5, 156.5)  # seconds from the first scrape: the Poisson phase, after its first 10 s


def test_vllms_running_gauge_leaves_out_a_request_in_its_prefill_step():
    snaps = recording_snaps(FOLDER / "long_prompts_short_answers.jsonl.gz")
    window = [s for s in snaps if STEADY[0] <= s.t - snaps[0].t <= STEADY[1]]
    a, b = window[0], window[-1]
    rate = delta(a, b, "vllm:request_success_total") / (b.t - a.t)
    decode = mean_of(a, b, "vllm:request_decode_time_seconds")
    prefill = mean_of(a, b, "vllm:request_prefill_time_seconds")
    queue = mean_of(a, b, "vllm:request_queue_time_seconds")
    gauge = statistics.fmean(s.get("vllm:num_requests_running", 0.0) for s in window)
    assert prefill > decode  # the load does what it is for: the first step is the longer part
    # Little's law on the time a scrape can see a request as running: its decode, not its prefill
    assert abs(gauge / (rate * decode) - 1) < 0.25
    assert gauge < 0.5 * rate * (queue + prefill + decode)


def test_the_simulation_reproduces_long_prompts_beside_short_answers():
    # no scrape of most intervals saw a request running (each was in its prefill step or gone), and the few
    # ITLs came from decode steps: the step fit must not credit those intervals' long prefills to ITLs of 24 ms,
    # which priced a 1,375-token prefill at 0.33 s against the 0.66 s vLLM took
    snaps = recording_snaps(FOLDER / "long_prompts_short_answers.jsonl.gz")
    t0 = snaps[0].t
    pred = predict(
        [s for s in snaps if s.t - t0 <= STEADY[1]], in_window(snaps, t0 + STEADY[0], t0 + STEADY[1]), {}
    )
    measured, unchanged = pred.measured, pred.unchanged
    assert abs(unchanged.ttft_p50_s / measured.ttft_p50_s - 1) < 0.2
    assert abs(unchanged.ttft_p95_s / measured.ttft_p95_s - 1) < 0.25
    # and the running gauge as vLLM shows it, which a count from admission would read at more than twice
    assert abs(unchanged.running / measured.running - 1) < 0.25
