"""Data-parallel servers, judged per engine, on expositions composed from real vLLM 0.32 scrapes.

The CPU backend records one engine at a time; an 8-engine server (`engine="0"`…`"7"`) is built here by giving each
engine the samples of a real recording: a batch-capped server (`--max-num-seqs 4`, 20 waiting) for the engines that
queue, a healthy open-loop one (0-3 running, nothing waiting) for the others. One engine capped while seven have room
is batch_cap at that engine's cap (4, not the ~14 running summed over engines) with engine_imbalance beside it.
"""

from __future__ import annotations

import pytest

from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from tests.support import compose
from tests.support.replays import replayed

CAPPED_FROM, HEALTHY_FROM, N = 20, 10, 80  # seconds into each recording: both busy for N scrapes


def _server(shared_032, tmp_path, queuing: set[int], engines: int = 8):
    capped = compose.frames(shared_032 / "batch_cap.jsonl.gz")[CAPPED_FROM : CAPPED_FROM + N]
    healthy = compose.frames(shared_032 / "healthy.jsonl.gz")
    out = []
    for i, (t, text) in enumerate(capped):
        texts = [text if k in queuing else healthy[HEALTHY_FROM + (i + 7 * k) % N][1] for k in range(engines)]
        out.append((t, compose.data_parallel(texts)))  # type: ignore[arg-type]
    return compose.write(tmp_path / "dp.jsonl", out)


def _judged(path, cadence: float):
    pipeline = Pipeline(load_files(default_rule_files()))
    cycles = list(replay(pipeline, [path], interval_s=5.0, scrape_every_s=cadence))
    start = cycles[0].t
    return [d for c in cycles if c.t - start >= 60 for d in c.diagnoses if d.model_name]


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
@pytest.mark.parametrize("cadence", [0.0, 15.0], ids=["native", "scrape15s"])
def test_one_engine_queuing_while_seven_have_room_is_an_imbalance_not_a_cap_of_the_sum(
    shared_032, tmp_path, cadence
):
    got = _judged(_server(shared_032, tmp_path, queuing={3}), cadence)
    assert got
    capped = [d for d in got if d.bottleneck == "batch_cap"]
    assert len(capped) >= 0.9 * len(got)  # engine 3 is at its --max-num-seqs 4; running summed is ~14
    for d in capped:
        cap = next(f for f in d.findings if f.name == "batch_cap")
        assert cap.evidence["batch_cap_per_engine"] == 4 and cap.evidence["engines_batch_cap"] == "3"
        assert d.advice[0].flag == "router" and "engine 3" in d.advice[0].text
        assert "from 4 " in d.advice[1].text
    fired = [d for d in got if any(f.name == "engine_imbalance" for f in d.findings)]
    assert len(fired) >= 0.9 * len(got)
    finding = next(f for f in fired[-1].findings if f.name == "engine_imbalance")
    assert finding.evidence["engines_queuing"] == "3"
    assert "3" not in str(finding.evidence["engines_with_room"]).split(", ")
    assert finding.evidence["engines"] == 8
    text = " ".join(a.text for a in finding.advice)
    assert "--data-parallel-size" in text and "router" in text and "affinity" in text


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
@pytest.mark.parametrize("cadence", [0.0, 15.0], ids=["native", "scrape15s"])
def test_eight_capped_engines_give_the_cap_of_one_engine_not_the_sum(shared_032, tmp_path, cadence):
    got = _judged(_server(shared_032, tmp_path, queuing=set(range(8))), cadence)
    assert [d.bottleneck for d in got].count("batch_cap") >= 0.9 * len(got)
    d = next(d for d in got if d.bottleneck == "batch_cap")
    assert d.evidence["running_max_1m"] == 32  # the sum over engines stays visible as the target's total
    finding = next(f for f in d.findings if f.name == "batch_cap")
    assert finding.evidence["batch_cap_per_engine"] == 4
    assert "running_max_1m" not in finding.evidence
    assert d.advice[0].text.startswith("raise `--max-num-seqs` from 4 ")
    assert "per engine; 8 data-parallel engines" in d.advice[0].text
    assert not any(f.name == "engine_imbalance" for f in d.findings)


def test_a_single_engine_never_reports_an_imbalance(shared_032):
    for c in replayed(shared_032 / "batch_cap.jsonl.gz"):
        for d in c.diagnoses:
            assert not any(f.name == "engine_imbalance" for f in d.findings)
            assert "engines" not in d.evidence
