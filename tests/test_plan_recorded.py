"""Plan's pick, recorded: the configuration it chooses holds every SLO on real vLLM, the next cheaper one breaks one.

The fixtures (tests/fixtures/recordings/vllm-0.32-cpu-plancheck/, README there) are a light run of today's flags
and one run per configuration plan names for ×3 that traffic, each at the rate one of its replicas gets. The test
runs `kvdoctor plan` on the light run now, so a change to plan that picks something else fails here until the new
pick is recorded too.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from functools import cache
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.window import in_window, measure

HERE = Path(__file__).parent / "fixtures/recordings/vllm-0.32-cpu-plancheck"
DOC = json.loads((HERE / "plancheck.json").read_text())
LIGHT = next(r for r in DOC["runs"] if r["role"] == "light")


@cache
def plan() -> dict:
    """`kvdoctor plan --json` on the light run, for the fixtures' load and SLOs."""
    lo, hi = LIGHT["step"]["window"]
    slos = [f for k, v in DOC["slos"].items() for f in ("--slo", f"{k[:-2]}={v:g}s")]
    argv = ["plan", str(HERE / LIGHT["recording"]), "--window", f"{lo:g}:{hi:g}", *slos]
    argv += ["--max-num-seqs", str(LIGHT["max_num_seqs"]), "--load", f"x{DOC['load']:g}"]
    argv += ["--gpu-hour-cost", "2", "--json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    assert rc == 0, out.getvalue()
    return json.loads(out.getvalue())


def recorded(candidate: dict) -> dict:
    """The run recorded for a candidate: its cap, and the rate each of its replicas gets at the planned load."""
    cap = candidate["changes"].get("max_num_seqs", LIGHT["max_num_seqs"])
    assert set(candidate["changes"]) <= {"max_num_seqs"}, f"not recorded: {candidate['changes']}"
    per_replica = plan()["current"]["requests_per_s"] * DOC["load"] / candidate["replicas"]
    for run in DOC["runs"]:
        if run["role"] != "light" and run["max_num_seqs"] == cap and run["replicas"] == candidate["replicas"]:
            # the recorded rate is the planned one (the light run's measured rate × load, split evenly)
            assert math.isclose(run["rate_per_replica"], per_replica, rel_tol=0.1), (run["name"], per_replica)
            return run
    raise AssertionError(f"no recording of {candidate['replicas']} × max_num_seqs={cap}: record it (README)")


def measured(run: dict) -> dict[str, float | None]:
    """What vLLM's own metrics show over the run's steady part, read from its recording now."""
    snaps = recording_snaps(HERE / run["recording"])
    return measure(in_window(snaps, *run["step"]["window_unix"])).to_dict()


def broken(run: dict) -> list[str]:
    """The SLOs the recorded run broke (no finished request counts as broken)."""
    got = measured(run)
    return [k for k, v in DOC["slos"].items() if got[k] is None or got[k] > v]


def test_the_light_run_is_what_the_slos_and_plans_fit_come_from():
    got = measured(LIGHT)
    assert got["waiting"] == 0 and got["running"] < LIGHT["max_num_seqs"]  # light: no queue, below the cap
    assert DOC["slos"]["itl_p50_s"] == float(f"{2 * got['itl_p50_s']:.2g}")
    assert DOC["slos"]["ttft_p95_s"] == float(f"{3 * got['ttft_p95_s']:.2g}")


def test_todays_flags_break_at_the_planned_load_so_plan_has_something_to_choose():
    p = plan()
    assert p["feasible"] and p["current"]["predicted"]["overloaded"]
    assert all(h < DOC["load"] for h in p["current"]["headroom"].values())


def test_the_chosen_configuration_holds_every_slo_when_recorded():
    chosen = plan()["chosen"]
    assert chosen["meets_slos"]
    run = recorded(chosen)
    assert broken(run) == [], (run["name"], measured(run))


@pytest.mark.xfail(
    strict=True,
    reason="plan over-provisions here: from the light run (3.6 running) it prices 1 × max_num_seqs=64 at 3 req/s "
    "at ITL p50 111 ms and TTFT p95 1.9 s (45 running); recorded, that replica served 2.9 req/s at 22 running with "
    "ITL p50 47 ms and TTFT p95 0.47 s, inside every SLO (issue 21's step model beyond the window's batch)",
)
def test_the_next_cheaper_candidate_breaks_at_least_one_slo_when_recorded():
    p = plan()
    cheaper = [c for c in p["candidates"] if c["cost_per_hour_usd"] < p["chosen"]["cost_per_hour_usd"]]
    # the closest of the cheaper ones, by plan's own reading: the best worst margin
    nearest = max(cheaper, key=lambda c: min(c["margins"].values()))
    assert not nearest["meets_slos"]
    run = recorded(nearest)
    assert broken(run), (run["name"], measured(run))


def test_the_same_price_without_the_flag_change_breaks_as_plan_said():
    p = plan()
    same = [
        c
        for c in p["candidates"]
        if c["replicas"] == p["chosen"]["replicas"] and not c["changes"] and not c["meets_slos"]
    ]
    assert same, "plan should have tried the pick's replicas with today's flags"
    assert broken(recorded(same[0]))


def candidates_recorded() -> list[tuple[str, dict]]:
    """Each candidate plan tried whose configuration was recorded, named by its recording."""
    out = []
    for c in plan()["candidates"]:
        with contextlib.suppress(AssertionError):
            out.append((recorded(c)["name"], c))
    return out


# plan's verdict on one replica of cap 64 is the one it gets wrong (see the xfail above)
WRONG = {"plancheck_cheaper_c64"}


def test_plans_verdict_on_every_recorded_candidate_is_what_the_recording_shows():
    checked = {}
    for name, c in candidates_recorded():
        run = next(r for r in DOC["runs"] if r["name"] == name)
        checked[name] = (c["meets_slos"], not broken(run))
    assert len(checked) >= 5, checked  # the pick, today's flags ×2, one replica of caps 16, 32 and 64
    agree = {n for n, (predicted, held) in checked.items() if predicted == held}
    assert set(checked) - agree == WRONG, checked
