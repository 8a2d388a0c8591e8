"""Requests deferred behind full LoRA adapter slots (real vLLM 0.32, --max-loras 2, three adapters in use)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.replays import replayed

FIELD = Path(__file__).parents[1] / "fixtures" / "recordings" / "vllm-0.32-cpu-field"
REC = FIELD / "lora.jsonl.gz"


@pytest.mark.skipif(not REC.exists(), reason="the LoRA fixture is not present")
@pytest.mark.parametrize("cadence", [0.0, 15.0], ids=["native", "scrape15s"])
def test_deferred_lora_requests_are_named_with_the_slots_to_add(cadence):
    label = next(x for x in json.loads((FIELD / "labels.json").read_text()) if x["file"] == REC.name)
    got = [
        d
        for c in replayed(REC, cadence)
        for d in c.diagnoses
        if label["steady_from"] + 30 <= d.t <= label["steady_to"]  # the alert's `for: 30s`
    ]
    # no modelled class: KV, batch and compute are fine
    assert got and {d.verdict for d in got} == {"unknown"}
    for d in got:
        (f,) = [f for f in d.findings if f.name == "lora_adapter_slots"]
        assert f.evidence["waiting_deferred"] >= 4  # adapter c's four workers
        assert f.advice[0].flag == "--max-loras"
        assert f.advice[0].text.startswith("raise `--max-loras` from 2 to at least 3")


def test_a_server_without_lora_never_reports_adapter_slots(shared_032):
    for c in replayed(shared_032 / "kv_bound.jsonl.gz"):
        assert all(f.name != "lora_adapter_slots" for d in c.diagnoses for f in d.findings)
