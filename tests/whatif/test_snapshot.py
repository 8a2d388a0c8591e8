"""A snapshot holds what the exposition says: checked frame by frame against prometheus-client's reading of it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvdoctor.ingest.parse import Parser
from kvdoctor.ingest.recording import load_frames
from kvdoctor.vllm_metrics import ALIASES, HISTOGRAMS
from kvdoctor.whatif.window import Snap, snapshot

RECORDINGS = Path(__file__).parents[1] / "fixtures/recordings"
CASES = [
    "vllm-0.32-cpu-specdecode/spec_decode.jsonl.gz",  # acceptance per draft position
    "vllm-0.32-cpu-extra/restart.jsonl.gz",  # cache_config_info changes mid-recording
    "vllm-0.32-cpu-field/dp2.jsonl.gz",  # two engines: summed, KV usage the higher one's
    "vllm-0.10.2-cpu/kv_bound.jsonl.gz",  # the older metric names
]


def _reading(t: float, text: str) -> Snap:
    """The Snap a person would write down from the page: every engine summed, KV usage the highest, bad values out."""
    snap = Snap(t)
    engines = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name.endswith("_created") or math.isnan(value) or value < 0 or value == math.inf:
                continue
            if name == "vllm:cache_config_info":
                engines.add(labels.get("engine", "0"))
                snap.info = snap.info or dict(labels)
            elif name.endswith("_bucket"):
                if name[: -len("_bucket")] in HISTOGRAMS and "le" in labels:
                    per_bound = snap.buckets.setdefault(name[: -len("_bucket")], {})
                    bound = float(labels["le"])
                    per_bound[bound] = per_bound.get(bound, 0.0) + value
            elif name.startswith("vllm:") or name == "process_start_time_seconds":
                if name in ALIASES["kv"]:
                    snap.flat[name] = max(snap.flat.get(name, 0.0), value)
                    continue
                if name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
                    key = f'{name}{{position="{labels.get("position", "")}"}}'
                    snap.flat[key] = snap.flat.get(key, 0.0) + value
                if name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):  # and per engine
                    key = f'{name}{{engine="{labels.get("engine", "0")}"}}'
                    snap.flat[key] = snap.flat.get(key, 0.0) + value
                if name == "vllm:num_requests_waiting_by_reason":  # why they wait, as well as how many
                    key = f'{name}{{reason="{labels.get("reason", "")}"}}'
                    snap.flat[key] = snap.flat.get(key, 0.0) + value
                snap.flat[name] = snap.flat.get(name, 0.0) + value
    snap.engines = len(engines)
    return snap


@pytest.mark.parametrize("case", CASES)
def test_every_frame_snapshot_equals_the_page_read_independently(case: str) -> None:
    parser = Parser()  # one per target, as the daemon keeps it: its cached lines are what later frames reuse
    frames = [f for f in load_frames(RECORDINGS / case) if f.text]
    assert len(frames) > 20
    for i, f in enumerate(frames):
        assert f.text is not None
        got = snapshot(f.t, parser.parse(f.text).samples)
        assert got == _reading(f.t, f.text), f"{case} frame {i + 1}"
        assert got.buckets and got.flat and got.engines >= 1


def test_values_no_simulation_can_use_are_left_out() -> None:
    page = (
        'vllm:num_requests_running{engine="0"} NaN\n'
        'vllm:num_requests_running{engine="1"} 3\n'
        'vllm:num_requests_waiting{engine="0"} -1\n'
        'vllm:num_requests_waiting{engine="1"} +Inf\n'
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 2\n'
        'vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1"} 5\n'
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 4\n'
        'vllm:made_up_seconds_bucket{le="1"} 9\n'
        'python_gc_objects_collected_total{generation="0"} 7\n'
    )
    got = snapshot(1.0, Parser().parse(page).samples)
    assert got.flat == {"vllm:num_requests_running": 3.0, 'vllm:num_requests_running{engine="1"}': 3.0}
    assert got.buckets == {"vllm:time_to_first_token_seconds": {0.1: 7.0, math.inf: 4.0}}
    assert got == _reading(1.0, page)


def test_buckets_whose_bound_is_no_number_and_values_past_any_counter_are_left_out() -> None:
    # a fuzzed page: `le="abc"` raised out of the replay; 1e308 summed to +Inf downstream
    page = (
        'vllm:time_to_first_token_seconds_bucket{le="0.1"} 2\n'
        'vllm:time_to_first_token_seconds_bucket{le="abc"} 3\n'
        'vllm:time_to_first_token_seconds_bucket{le="NaN"} 3\n'
        'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 4\n'
        "vllm:request_success_total 1e308\n"
        "vllm:generation_tokens_total 120\n"
    )
    got = snapshot(1.0, Parser().parse(page).samples)
    assert got.buckets == {"vllm:time_to_first_token_seconds": {0.1: 2.0, math.inf: 4.0}}
    assert got.flat == {"vllm:generation_tokens_total": 120.0}
