"""Metric generations: data-parallel engines, old and new names side by side, V0 dumps — one verdict each."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from kvdoctor.ingest.recording import load_frames
from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from tests.conftest import FIXTURES, labelled_windows
from tests.support.replays import replayed

FIXTURE_DIR = FIXTURES / "recordings"

ENGINE = re.compile(r'engine="0"')


def _two_engines(src, dst) -> None:
    """Every vllm: sample of engine 0 copied as engine 1: a data-parallel server with two identical engines."""
    with gzip.open(src, "rt") as fh, gzip.open(dst, "wt") as out:
        for line in fh:
            rec = json.loads(line)
            if "text" in rec:
                extra = [ENGINE.sub('engine="1"', ln) for ln in rec["text"].split("\n") if 'engine="0"' in ln]
                rec["text"] = rec["text"] + "\n".join(extra) + "\n"
            out.write(json.dumps(rec) + "\n")


def test_data_parallel_engines_are_one_server(shared_032, tmp_path):
    dp = tmp_path / "kv_bound_dp.jsonl.gz"
    _two_engines(shared_032 / "kv_bound.jsonl.gz", dp)
    single = replayed(shared_032 / "kv_bound.jsonl.gz", interval_s=15.0)
    double = list(replay(Pipeline(load_files(default_rule_files())), [dp]))
    a, b = single[-2].diagnoses[0], double[-2].diagnoses[0]
    assert len(double[-2].diagnoses) == 1  # one verdict per (target, model), not per engine
    assert a.bottleneck == b.bottleneck == "kv_cache"
    assert b.evidence["running"] == 2 * a.evidence["running"]  # requests add up across engines
    assert b.evidence["kv_usage"] == a.evidence["kv_usage"]  # the fullest engine's cache, not a sum


def test_old_and_new_names_together_are_not_double_counted():
    windows = [w for w in labelled_windows() if w["dir"] == "vllm-0.10.2-cpu" and w["expected"] == "kv_cache"]
    if not windows:
        pytest.skip("no vLLM 0.10.2 fixture")
    text = next(f.text for f in load_frames(windows[0]["path"]) if f.text)
    assert "vllm:gpu_cache_usage_perc" in text and "vllm:kv_cache_usage_perc" in text
    p = Pipeline(load_files(default_rule_files()))
    for cycle in replay(p, [windows[0]["path"]]):
        for d in cycle.diagnoses:
            assert 0 <= d.evidence.get("kv_usage", 0) <= 1  # max of both names, never their sum
    series = list(p.store.select("kvdoctor:kv_usage:ratio"))
    assert len(series) == 1


def test_speculative_decoding_with_low_acceptance_is_a_finding():
    path = FIXTURE_DIR / "vllm-0.32-cpu-specdecode" / "spec_decode.jsonl.gz"
    if not path.exists():
        pytest.skip("no speculative-decoding fixture")
    last = replayed(path, interval_s=15.0)[-1].diagnoses[0]
    assert last.bottleneck == "healthy"
    (finding,) = [f for f in last.findings if f.name == "spec_decode_low_acceptance"]
    assert (
        0.1 < finding.evidence["spec_decode_acceptance"] < 0.4
    )  # the recording accepted about 21 % of drafts
    assert any("num_speculative_tokens" in a.text for a in finding.advice)
