"""Compute advice names only levers the server has: speculative decoding only where it drafts."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor.diagnosis import advise
from tests.support.replays import replayed

SHARED = Path(__file__).parents[3] / "shared" / "recordings" / "vllm-0.32-cpu" / "compute_bound.jsonl.gz"


@pytest.mark.skipif(not SHARED.exists(), reason="shared recordings not present")
def test_compute_advice_on_a_server_without_spec_decode_does_not_mention_it():
    got = [d for c in replayed(SHARED) for d in c.diagnoses]
    d = [d for d in got if d.verdict == "compute"][-1]
    flags = [a.flag for a in d.advice]
    assert "replicas" in flags
    assert "--speculative-config" not in flags
    assert "specul" not in " ".join(a.text for a in d.advice)


def test_compute_advice_where_the_server_drafts_says_turn_speculation_off_at_peak():
    ev = {"itl_p50_s": 0.2, "itl_baseline_s": 0.01, "spec_decode_acceptance": 0.6}
    flags = [a.flag for a in advise.compute(ev)]
    assert "--speculative-config" in flags
    # the same change as `kvdoctor whatif --set num_speculative_tokens=0`, so the advisor predicts its effect
    spec = next(a for a in advise.compute(ev) if a.flag == "--speculative-config")
    assert spec.change == {"num_speculative_tokens": 0}
    assert "--speculative-config" not in [
        a.flag for a in advise.compute({k: ev[k] for k in ev if "spec" not in k})
    ]


def test_compute_advice_says_how_close_tokens_per_s_are_to_the_servers_ceiling():
    # the co-binding server: 31 running, ITL 6× its light-load value
    ev = {"itl_p50_s": 0.06, "itl_baseline_s": 0.01, "running_avg_1m": 31.0}
    why = advise.compute(ev)[0].text
    assert "6.0× its light-load 10.0 ms at 31 running" in why
    assert "tokens/s at 86 % of this server's ceiling" in why
    assert "compute from 70 %, 3.1× here" in why
    # the recorded series wins over the arithmetic when the pack has it
    assert "at 91 % of this server's ceiling" in advise.compute({**ev, "compute_utilisation": 0.91})[0].text
