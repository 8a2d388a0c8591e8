"""Plan's pick, recorded: the configuration it chooses holds every SLO on real vLLM, the next cheaper one breaks one.

Each check (a fixture folder, README there) is a light run of today's flags and one run per configuration plan
names for a multiple of that traffic, each at the rate one of its replicas gets:
- vllm-0.32-cpu-plancheck: the tiny model on an AMD EPYC in fp32, ×3, recorded over two sittings;
- vllm-0.32-cpu-plancheck2: the Llama-shaped model on an Intel Xeon in bf16, ×4, recorded in one sitting;
- vllm-0.32-cpu-plancheck3: the same again on another day, recorded alone on the machine with arrivals whose seed
  carries the planned load (its first one-replica runs carried 15 % less and were set aside, README there).
The tests run `kvdoctor plan` on the light run now, so a change to plan that picks something else fails here until
the new pick is recorded too.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.window import in_window, measure

FIXTURES = Path(__file__).parent / "fixtures/recordings"


@dataclass(frozen=True)
class Check:
    """One recorded check of plan's pick, and the recorded runs whose verdict plan gets wrong."""

    id: str
    folder: str
    wrong: frozenset[str] = frozenset()
    cheaper_held: str = ""  # why the next cheaper candidate held when recorded, where it did (a strict xfail)

    @property
    def here(self) -> Path:
        """The fixture folder."""
        return FIXTURES / self.folder

    @property
    def doc(self) -> dict:
        """Its plancheck.json."""
        return _doc(self.here)

    @property
    def light(self) -> dict:
        """The light run plan reads."""
        return next(r for r in self.doc["runs"] if r["role"] == "light")


# plan's verdict on one replica of cap 64 is the one it gets wrong on both checks
FIRST = Check(
    "tiny-epyc-fp32",
    "vllm-0.32-cpu-plancheck",
    frozenset({"plancheck_cheaper_c64"}),
    "plan over-provisions here: from the light run (3.6 running) it prices 1 × max_num_seqs=64 at 3 req/s at ITL "
    "p50 111 ms and TTFT p95 1.9 s (45 running); recorded, that replica served 2.9 req/s at 22 running with ITL p50 "
    "47 ms and TTFT p95 0.47 s, inside every SLO (issue 21's step model beyond the window's batch; that run also "
    "read a lower fixed cost a step: 19 ms at 3 running against the light run's 26)",
)
SECOND = Check(
    "llama-xeon-bf16",
    "vllm-0.32-cpu-plancheck2",
    frozenset({"plancheck2_cheaper_c64"}),
    "plan over-provisions here too: from the light run (3.5 running) it prices 1 × max_num_seqs=64 at 4 req/s at "
    "ITL p50 56 ms (33 running); recorded, that replica served 3.8 req/s at 26 running with ITL p50 42.4 ms, under "
    "the 43 ms SLO by 1 % (inside vLLM's 25-50 ms bucket)",
)
THIRD = Check(
    "llama-xeon-bf16-again",
    "vllm-0.32-cpu-plancheck3",
    frozenset({"plancheck3_cheaper_c64b", "plancheck3_one_c32b"}),
    "plan over-provisions a third time: from the light run (3.2 running) it prices 1 × max_num_seqs=64 at 4.25 req/s "
    "at ITL p50 37.5 ms (23 running) and 1 × 32 at TTFT p95 0.88 s; recorded at 4.29 req/s, they ran 18 running with "
    "ITL p50 34.0 and 31.0 ms and TTFT p95 0.30 and 0.27 s, inside the 36 ms and 0.68 s SLOs",
)
CHECKS = [pytest.param(c, id=c.id) for c in (FIRST, SECOND, THIRD)]
CHEAPER = [
    pytest.param(
        c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.cheaper_held)] if c.cheaper_held else []
    )
    for c in (FIRST, SECOND, THIRD)
]


@cache
def _doc(here: Path) -> dict:
    return json.loads((here / "plancheck.json").read_text())


@cache
def plan(check: Check) -> dict:
    """`kvdoctor plan --json` on the light run, for the check's load and SLOs."""
    light, doc = check.light, check.doc
    lo, hi = light["step"]["window"]
    slos = [f for k, v in doc["slos"].items() for f in ("--slo", f"{k[:-2]}={v:g}s")]
    argv = ["plan", str(check.here / light["recording"]), "--window", f"{lo:g}:{hi:g}", *slos]
    argv += ["--max-num-seqs", str(light["max_num_seqs"]), "--load", f"x{doc['load']:g}"]
    argv += ["--gpu-hour-cost", "2", "--json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    assert rc == 0, out.getvalue()
    return json.loads(out.getvalue())


def planned_rate(check: Check, candidate: dict) -> float:
    """The rate each of a candidate's replicas gets at the planned load (the light run's measured rate × load,
    split evenly)."""
    return plan(check)["current"]["requests_per_s"] * check.doc["load"] / candidate["replicas"]


def recorded(check: Check, candidate: dict) -> dict:
    """The run recorded for a candidate: its cap, and the rate each of its replicas gets at the planned load."""
    cap = candidate["changes"].get("max_num_seqs", check.light["max_num_seqs"])
    assert set(candidate["changes"]) <= {"max_num_seqs"}, f"not recorded: {candidate['changes']}"
    per_replica = planned_rate(check, candidate)
    for run in check.doc["runs"]:
        if run["role"] != "light" and run["max_num_seqs"] == cap and run["replicas"] == candidate["replicas"]:
            # the recorded rate is the planned one (the light run's measured rate × load, split evenly), and so is
            # the rate its seed's arrivals came at: a Poisson draw of 150 s can fall 15 % short of its rate
            arrived = run["step"]["client"]["arrivals_per_s"]
            assert math.isclose(run["rate_per_replica"], per_replica, rel_tol=0.1), (run["name"], per_replica)
            assert math.isclose(arrived, per_replica, rel_tol=0.12), (run["name"], arrived, per_replica)
            return run
    raise AssertionError(f"no recording of {candidate['replicas']} × max_num_seqs={cap}: record it (README)")


def measured(check: Check, run: dict) -> dict[str, float | None]:
    """What vLLM's own metrics show over the run's steady part, read from its recording now."""
    snaps = recording_snaps(check.here / run["recording"])
    return measure(in_window(snaps, *run["step"]["window_unix"])).to_dict()


def broken(check: Check, run: dict) -> list[str]:
    """The SLOs the recorded run broke (no finished request counts as broken)."""
    got = measured(check, run)
    return [k for k, v in check.doc["slos"].items() if got[k] is None or got[k] > v]


@pytest.mark.parametrize("check", CHECKS)
def test_the_light_run_is_what_the_slos_and_plans_fit_come_from(check: Check):
    got = measured(check, check.light)
    # light: no queue, below the cap
    assert got["waiting"] == 0 and got["running"] < check.light["max_num_seqs"]
    assert check.doc["slos"]["itl_p50_s"] == float(f"{2 * got['itl_p50_s']:.2g}")
    assert check.doc["slos"]["ttft_p95_s"] == float(f"{3 * got['ttft_p95_s']:.2g}")


@pytest.mark.parametrize("check", CHECKS)
def test_todays_flags_break_at_the_planned_load_so_plan_has_something_to_choose(check: Check):
    p = plan(check)
    assert p["feasible"] and p["current"]["predicted"]["overloaded"]
    assert all(h < check.doc["load"] for h in p["current"]["headroom"].values())


@pytest.mark.parametrize("check", CHECKS)
def test_the_chosen_configuration_holds_every_slo_when_recorded(check: Check):
    chosen = plan(check)["chosen"]
    assert chosen["meets_slos"]
    run = recorded(check, chosen)
    assert broken(check, run) == [], (run["name"], measured(check, run))


@pytest.mark.parametrize("check", CHEAPER)
def test_the_next_cheaper_candidate_breaks_at_least_one_slo_when_recorded(check: Check):
    p = plan(check)
    cheaper = [c for c in p["candidates"] if c["cost_per_hour_usd"] < p["chosen"]["cost_per_hour_usd"]]
    assert cheaper, "plan's pick is the cheapest price there is: the check needs a load that takes 2 replicas"
    # the closest of the cheaper ones, by plan's own reading: the best worst margin
    nearest = max(cheaper, key=lambda c: min(c["margins"].values()))
    assert not nearest["meets_slos"]
    run = recorded(check, nearest)
    assert broken(check, run), (run["name"], measured(check, run))


@pytest.mark.parametrize("check", CHECKS)
def test_the_same_price_without_the_flag_change_breaks_as_plan_said(check: Check):
    p = plan(check)
    same = [
        c
        for c in p["candidates"]
        if c["replicas"] == p["chosen"]["replicas"] and not c["changes"] and not c["meets_slos"]
    ]
    assert same, "plan should have tried the pick's replicas with today's flags"
    assert broken(check, recorded(check, same[0]))


def candidates_recorded(check: Check) -> list[tuple[str, dict]]:
    """Each candidate plan tried whose configuration was recorded, named by its recording."""
    out = []
    for c in plan(check)["candidates"]:
        with contextlib.suppress(AssertionError):
            out.append((recorded(check, c)["name"], c))
    return out


@pytest.mark.parametrize("check", CHECKS)
def test_plans_verdict_on_every_recorded_candidate_is_what_the_recording_shows(check: Check):
    checked = {}
    for name, c in candidates_recorded(check):
        run = next(r for r in check.doc["runs"] if r["name"] == name)
        checked[name] = (c["meets_slos"], not broken(check, run))
        # a replica that held on less traffic than planned would say nothing about the plan
        if checked[name][1]:
            planned = planned_rate(check, c)
            assert run["step"]["client"]["arrivals_per_s"] >= 0.95 * planned, (name, planned)
    # the pick, today's flags at its replicas, one replica of caps 16, 32 and 64
    assert len(checked) >= 5, checked
    agree = {n for n, (predicted, held) in checked.items() if predicted == held}
    assert set(checked) - agree == check.wrong, checked


# The EPYC check's canary was a known miss until session 20: the cheap end of the light fit's posterior priced one
# replica of cap 64 past the ITL SLO, where the run that held it read a faster day (19 ms a step at 3 running against
# the light run's 26). Calibrated to the light run's own mean ITL (whatif/calibration.py), it names that run.
CANARY = [
    pytest.param(FIRST, id=FIRST.id),
    pytest.param(SECOND, id=SECOND.id),
    pytest.param(THIRD, id=THIRD.id),
]


@pytest.mark.parametrize("check", CANARY)
def test_where_one_replica_fewer_held_when_recorded_plan_names_it_worth_a_canary(check: Check):
    p = plan(check)
    fewer = [
        name
        for name, c in candidates_recorded(check)
        if c["replicas"] < p["chosen"]["replicas"]
        and not broken(check, next(r for r in check.doc["runs"] if r["name"] == name))
    ]
    assert fewer, "no cheaper recorded run held: nothing for a canary to find"
    canary = p["might_hold"]
    assert canary is not None, "plan named no cheaper configuration worth a canary"
    assert canary["meets_slos"] and canary["replicas"] < p["chosen"]["replicas"]
    assert recorded(check, canary)["name"] in fewer
    # the point prediction still breaks it: the pick stays the configuration plan predicts holds
    point = next(
        c
        for c in p["candidates"]
        if c["changes"] == canary["changes"] and c["replicas"] == canary["replicas"]
    )
    assert not point["meets_slos"]
