"""On real recordings, with the what-if's relief check on: the verdict is the limit whose relief helps.

A labelled window's `expected` is what the rule pack alone says (the Prometheus-only path, which cannot simulate);
`relief`, where present, is the verdict once the simulator has checked each relief (the cap ×2, the cache ×2, a second
replica) on the advisor, as `check`, `replay` and `serve` run it. Every batch-capped window without `relief` keeps
its class: there raising the cap does buy throughput.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.verdicts import Diagnosis
from kvdoctor.whatif.advisor import Advisor
from tests.conftest import labelled_windows

WINDOWS = labelled_windows()
RELIEF = [w for w in WINDOWS if "relief" in w]
CAPPED = [w for w in WINDOWS if w["expected"] == "batch_cap" and "relief" not in w]
CADENCES = pytest.mark.parametrize("cadence", [0.0, 15.0], ids=["native", "scrape15s"])


def _id(w: dict) -> str:
    return f"{w['dir']}/{w['file']}:{w['expected']}@{w['steady_from']:.0f}"


@lru_cache(maxsize=4)
def _replay(path: Path, cadence: float) -> list[tuple[float, Diagnosis]]:
    pipeline = Pipeline(load_files(default_rule_files()), advisor=Advisor())  # sync: simulated inline
    return [(c.t, d) for c in replay(pipeline, [path], 5.0, cadence) for d in c.diagnoses if d.model_name]


def _window(w: dict, cadence: float) -> list[Diagnosis]:
    return [d for t, d in _replay(w["path"], cadence) if w["steady_from"] - 0.5 <= t <= w["steady_to"] + 0.5]


@pytest.mark.slow  # each relief is a simulation of the recorded load
@CADENCES
@pytest.mark.parametrize("entry", RELIEF, ids=[_id(w) for w in RELIEF])
def test_co_binding_window_names_the_limit_whose_relief_helps(entry, cadence):
    got = _window(entry, cadence)
    checked = [d for d in got if any(f.name == "relief_check" for f in d.findings)]
    assert checked, [d.verdict for d in got]  # the simulator is asked within the window
    first = got.index(checked[0])
    after = [d.verdict for d in got[first:]]
    assert after.count(entry["relief"]) / len(after) >= 0.9, after
    d = checked[-1]
    assert d.verdict == entry["relief"]
    assert d.evidence["limit_rule"] == entry["expected"] == d.evidence["co_binding"]
    f = next(f for f in d.findings if f.name == "relief_check")
    assert "buys no throughput" in f.summary, f.summary  # the simulator's reason, in the user's words
    assert d.advice[0].flag == "replicas" and d.advice[0].effect is not None  # the change that helps leads


@pytest.mark.slow
@pytest.mark.parametrize("entry", CAPPED, ids=[_id(w) for w in CAPPED])
def test_a_cap_whose_raise_buys_throughput_stays_the_verdict(entry):
    got = [d.verdict for d in _window(entry, 0.0)]
    if not got:
        pytest.skip("window shorter than one evaluation")
    assert got.count("batch_cap") / len(got) >= 0.9, got
