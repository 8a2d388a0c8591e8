"""The batch cap read from a plateau of running under a queue, as the rule pack reads it, on recordings whose
--max-num-seqs the recording's notes give."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor.whatif.sources import default_window, recording_snaps
from kvdoctor.whatif.window import in_window
from kvdoctor.whatif.workload import DEFAULT_MAX_NUM_SEQS, infer_engine

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
