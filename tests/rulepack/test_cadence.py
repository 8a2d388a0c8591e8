"""The pack reads the same at any evaluation interval: kvdoctor evaluates it every cycle (5 s for whatif's measured
class, 15 s for the daemon by default, a scrape's cadence for replay), Prometheus at the group's 15 s."""

from __future__ import annotations

from pathlib import Path

from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files

# light load, then a KV-bound closed loop: the light-load ITL baseline is learned, then read at the limit
REC = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.16-cpu-field/transition_healthy_to_kv.jsonl.gz"


def _baselines(every_s: float) -> dict[float, float]:
    cycles = replay(Pipeline(load_files(default_rule_files())), [REC], every_s)
    out = {}
    for c in cycles:
        for d in c.diagnoses:
            b = d.evidence.get("itl_batch_baseline_s")
            if isinstance(b, float):
                out[round(c.t, 1)] = b
    return out


def test_the_light_load_baseline_is_the_same_at_a_5s_and_a_15s_interval() -> None:
    fine, coarse = _baselines(5.0), _baselines(15.0)
    both = sorted(set(fine) & set(coarse))
    assert len(both) >= 4
    # a moving average updated once an evaluation read 13.9 ms at 5 s against 6.4 ms at 15 s here
    for t in both:
        assert abs(fine[t] - coarse[t]) <= 0.15 * coarse[t], (t, fine[t], coarse[t])
