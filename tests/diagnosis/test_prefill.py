"""Long prompts (1,000-2,000 tokens, short answers) on real vLLM 0.32: compute with prefill advice, never batch_cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.replays import replayed

REC = Path(__file__).parents[1] / "fixtures" / "recordings" / "vllm-0.32-cpu-whatif" / "mnbt_before.jsonl.gz"


@pytest.mark.skipif(not REC.exists(), reason="rec's long-prompt fixture not present")
@pytest.mark.parametrize("cadence", [0.0, 15.0], ids=["native", "scrape15s"])
def test_prefill_bound_load_is_compute_with_prefill_advice(cadence):
    got = [d for c in replayed(REC, cadence) for d in c.diagnoses]
    assert "batch_cap" not in {d.verdict for d in got}  # 6-8 running of --max-num-seqs 128 is no cap
    d = [d for d in got if d.verdict == "compute"][-1]
    assert d.evidence["prefill_decode_ratio"] >= 8
    flags = [a.flag for a in d.advice]
    assert flags[:5] == [
        "prefill",
        "--enable-prefix-caching",
        "--max-num-batched-tokens",
        "--long-prefill-token-threshold",
        "disaggregated prefill",
    ]
    assert "mean inter-token latency" in d.advice[0].text and "TTFT" in d.advice[2].text
