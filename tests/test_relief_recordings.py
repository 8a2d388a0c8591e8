"""On real recordings, with the what-if's relief check on: the verdict is the limit whose relief helps.

A labelled window's `expected` is what the rule pack alone says (the Prometheus-only path, which cannot simulate);
with the simulator checking each relief (the cap ×2, the cache ×2, a second replica) on the advisor, as `check`,
`replay` and `serve` run it, a window's `relief` label (where there is one) names the verdict, and every other
limited window keeps its class: there the limit's own relief pays. The co-binding windows (a cap reached
with a queue while compute limits throughput) must name compute first, with the simulator's reason and the replica
leading the advice. The advisor here is the real one in sync mode, asked at the end of the window (its history is the
whole recording up to then), so each window costs three or four simulations.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.verdicts import LIMITS, Diagnosis
from kvdoctor.whatif import relief
from kvdoctor.whatif.advisor import Advisor
from tests.conftest import labelled_windows

WINDOWS = labelled_windows()
LIMITED = [w for w in WINDOWS if w["expected"] in LIMITS and "relief" not in w]
RELIEVED = [w for w in WINDOWS if "relief" in w]
SIM_SCRAPES = 5  # the what-if learns from no fewer scrapes (whatif/predict.learn)
# Known gaps, strict (a fix makes them fail until removed). At 15 s scrapes the simulator puts the cap x2 at +5.3 %
# tokens/s on this window, on the relief rule's 5 % line (whatif on the whole window: +4.8 % at 15 s, +5.6 % at 1 s),
# where the label says ~0 %. The recordings do not show ~0 %: ITL p50 grows linearly with the batch up to the cap on
# every ramp (llama_ramp_c32 75 ms + 7.8 ms a running request, tiny_ramp_c32 18 + 1.5 ms, each step within 8 % of its
# line), and llama_ramp_c32's saturated steps serve 42 tok/s at 16 running and 48 at 27, the +12-15 % that line's
# amortised fixed cost says. This window's own steps (ITL mean 87 ms + 6.2 ms a decoder + 3.4 ms a prefill token by
# least squares, 50 tok/s at 31.5 running as measured) give +9 % at 64 running. Naming compute needs a per-request
# cost that grows faster past 32 than anything recorded shows (issue 21 item 1).
STEP_MODEL_GAPS = {
    ("llama_cobind_c32.jsonl.gz", 1796169326, 15.0): "cap x2 +5.3 % at 15 s scrapes: at the 5 % line",
}


def _id(w: dict) -> str:
    return f"{w['dir']}/{w['file']}:{w['expected']}@{w['steady_from']:.0f}"


class _AtTheEnd(Advisor):
    """The real advisor (sync), which keeps every scrape but is first asked at `at`."""

    def __init__(self, at: float) -> None:
        super().__init__()
        self.at = at

    def annotate(self, diagnoses: list[Diagnosis], t: float) -> list[Diagnosis]:
        return super().annotate(diagnoses, t) if t >= self.at else diagnoses


def _at_the_end(
    path: Path, steady_to: float, cadence: float, asked_from: float | None = None
) -> Diagnosis | None:
    """The diagnosis of the window's last evaluation, with the relief check run on it (asked from `asked_from`)."""
    at = steady_to - 4.5  # evaluations are 5 s apart: the last one inside the window
    pipeline = Pipeline(load_files(default_rule_files()), advisor=_AtTheEnd(min(at, asked_from or at)))
    for c in replay(pipeline, [path], 5.0, cadence):
        if c.t >= at:
            return next((d for d in c.diagnoses if d.model_name), None) if c.t <= steady_to + 0.5 else None
    return None


@pytest.mark.slow
@pytest.mark.parametrize("entry", LIMITED, ids=[_id(w) for w in LIMITED])
def test_a_limit_whose_own_relief_pays_stays_the_verdict(entry):
    # batch caps whose raise buys throughput, caches whose growth does, compute that only a replica relieves
    d = _at_the_end(entry["path"], entry["steady_to"], 0.0)
    assert d is not None
    assert d.verdict == entry["expected"], [(f.name, f.summary) for f in d.findings]


@pytest.mark.slow
@pytest.mark.parametrize("cadence", [0.0, 15.0], ids=["native", "scrape15s"])
@pytest.mark.parametrize("entry", RELIEVED, ids=[_id(w) for w in RELIEVED])
def test_the_co_binding_window_names_the_limit_whose_relief_helps_first_with_the_simulators_reason(
    entry, cadence, request
):
    if cadence and entry["steady_to"] - entry["steady_from"] < SIM_SCRAPES * cadence:
        pytest.skip(f"the limit holds under {SIM_SCRAPES} scrapes at this interval: nothing to simulate from")
    gap = STEP_MODEL_GAPS.get((entry["file"], round(entry["steady_from"]), cadence))
    if gap:
        request.applymarker(pytest.mark.xfail(reason=gap, strict=True))
    # asked through the window, as the daemon asks every cycle: a queue draining at the end of it is judged on
    # the stretch the limit held (the advisor keeps that judgement while the limit holds)
    d = _at_the_end(entry["path"], entry["steady_to"], cadence, entry["steady_from"])
    assert d is not None
    check = next((f for f in d.findings if f.name == "relief_check"), None)
    assert d.verdict == entry["relief"] and check is not None, [(f.name, f.summary) for f in d.findings]
    # both names on record: the pack's as co-binding
    assert d.evidence["limit_rule"] == d.evidence["co_binding"] == entry["expected"]
    assert check.evidence["limit_checked"] == entry["relief"]
    if entry["relief"] == "compute":
        # the reason: the rule's relief buys no capacity at a saturated server, the replica does
        assert "buys no throughput" in check.summary and "compute-bound; a second replica" in check.summary
        assert d.advice[0].change == {"replicas": 2}, d.advice
        assert check.evidence[f"{entry['expected']}_relief_throughput_gain"] < 1 + relief.NOISE
        assert check.evidence["compute_relief_throughput_gain"] >= 1 + relief.NOISE
