"""On real recordings, with the what-if's relief check on: the verdict is the limit whose relief helps.

A labelled window's `expected` is what the rule pack alone says (the Prometheus-only path, which cannot simulate);
with the simulator checking each relief (the cap ×2, the cache ×2, a second replica) on the advisor, as `check`,
`replay` and `serve` run it, every batch-capped window keeps its class: there raising the cap buys throughput or
TTFT. (A `relief` label key would name another verdict; no recording here has one: the co-binding steps of
llama_ramp_c32 hold past the cap 27 s, under the advisor's 30 s.) The advisor here is the real one in sync mode, asked at the
end of the window (its history is the whole recording up to then), so each window costs three simulations.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.verdicts import Diagnosis
from kvdoctor.whatif.advisor import Advisor
from tests.conftest import labelled_windows

WINDOWS = labelled_windows()
CAPPED = [w for w in WINDOWS if w["expected"] == "batch_cap" and "relief" not in w]


def _id(w: dict) -> str:
    return f"{w['dir']}/{w['file']}:{w['expected']}@{w['steady_from']:.0f}"


class _AtTheEnd(Advisor):
    """The real advisor (sync), which keeps every scrape but is first asked at `at`."""

    def __init__(self, at: float) -> None:
        super().__init__()
        self.at = at

    def annotate(self, diagnoses: list[Diagnosis], t: float) -> list[Diagnosis]:
        return super().annotate(diagnoses, t) if t >= self.at else diagnoses


def _at_the_end(path: Path, steady_to: float, cadence: float) -> Diagnosis | None:
    """The diagnosis of the window's last evaluation, with the relief check run on it."""
    at = steady_to - 4.5  # evaluations are 5 s apart: the last one inside the window
    pipeline = Pipeline(load_files(default_rule_files()), advisor=_AtTheEnd(at))
    for c in replay(pipeline, [path], 5.0, cadence):
        if c.t >= at:
            return next((d for d in c.diagnoses if d.model_name), None) if c.t <= steady_to + 0.5 else None
    return None


@pytest.mark.slow
@pytest.mark.parametrize("entry", CAPPED, ids=[_id(w) for w in CAPPED])
def test_a_cap_whose_raise_buys_throughput_stays_the_verdict(entry):
    d = _at_the_end(entry["path"], entry["steady_to"], 0.0)
    assert d is not None
    assert d.verdict == "batch_cap", [(f.name, f.summary) for f in d.findings]
