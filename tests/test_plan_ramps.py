"""The ramps benchmark's inputs are sound: ramps.json matches its fixtures, and `plan` answers on each light step.

Accuracy (predicted against measured breaking load) is benchmarks/bench_plan_ramps.py's, not asserted here.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
from functools import cache
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.whatif.plan import MAX_LOAD
from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.window import Snap, in_window, measure

FIXTURES = Path(__file__).parent / "fixtures/recordings"
RAMPS = FIXTURES / "vllm-0.32-cpu-ramps"  # tiny and Llama-shaped, fp32, an AMD EPYC
RAMPS2 = FIXTURES / "vllm-0.32-cpu-ramps2"  # Llama-shaped, bf16, an Intel Xeon (session 11)
RAMPS3 = (
    FIXTURES / "vllm-0.32-cpu-ramps3"
)  # held out at cap 16: Llama-shaped and multi-head, bf16 (session 21)
DOCS = {folder: json.loads((folder / "ramps.json").read_text()) for folder in (RAMPS, RAMPS2, RAMPS3)}
DOC = DOCS[RAMPS]
BY_NAME = {r["name"]: r for doc in DOCS.values() for r in doc["ramps"]}
FOLDER = {r["name"]: folder for folder, doc in DOCS.items() for r in doc["ramps"]}
MEASURED = (
    "ttft_p50_s",
    "ttft_p95_s",
    "itl_p50_s",
    "itl_p95_s",
    "queue_time_p95_s",
    "generation_tokens_per_s",
    "requests_per_s",
    "running",
    "waiting",
)


@cache
def snaps_of(name: str) -> list[Snap]:
    return recording_snaps(FOLDER[name] / BY_NAME[name]["recording"])


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=2e-3, abs_tol=1e-9)


def test_eight_ramps_three_shapes_three_caps_two_cpus_each_with_its_client_record():
    assert {r["name"] for r in DOC["ramps"]} == {
        "tiny_ramp_c32",
        "tiny_ramp_c32_fine",
        "tiny_ramp_c8",
        "llama_ramp_c32",
    }
    assert {r["name"] for r in DOCS[RAMPS2]["ramps"]} == {"llama_ramp_c8_bf16", "llama_ramp_c32_bf16"}
    assert {r["name"] for r in DOCS[RAMPS3]["ramps"]} == {"llama_ramp_c16_bf16", "mha_ramp_c16_bf16"}
    assert (
        "AMD EPYC" in DOC["host"]
        and "Intel Xeon" in DOCS[RAMPS2]["host"]
        and "Intel Xeon" in DOCS[RAMPS3]["host"]
    )
    for doc in (DOC, DOCS[RAMPS2]):
        assert {r["max_num_seqs"] for r in doc["ramps"]} == {8, 32}
    assert {r["max_num_seqs"] for r in DOCS[RAMPS3]["ramps"]} == {16}
    assert {r["model"].split(":")[0] for r in BY_NAME.values()} == {"tiny", "llama-shaped", "multi-head"}
    for r in BY_NAME.values():
        client = json.loads((FOLDER[r["name"]] / r["client"]).read_text())
        phases = client["phases"]
        assert [s["rate"] for s in r["steps"]] == [p["settings"]["rate"] for p in phases]
        ramp = [s["rate"] for s in r["steps"] if s["kind"] == "step"]
        assert len(ramp) >= 5 and ramp == sorted(ramp), r["name"]
        light = r["steps"][r["light_step"]]
        assert light["kind"] == "light" and light["rate"] == min(s["rate"] for s in r["steps"])
        for step, phase in zip(r["steps"], phases, strict=True):
            lo, hi = step["window_unix"]
            # the steady part: after the ramp-up, before the arrivals stop (the drain is not in it)
            assert phase["load_start"] + 10 <= lo < hi <= phase["load_start"] + phase["settings"]["duration"]


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_each_steps_measurements_are_what_its_fixture_shows(name):
    r, snaps = BY_NAME[name], snaps_of(name)
    t0 = snaps[0].t
    gaps = [b.t - a.t for a, b in itertools.pairwise(snaps)]
    every = DOCS[FOLDER[name]]["scrape_every_s"]
    assert min(gaps) >= every - 0.5 and max(gaps) <= every + 2.0  # no holes
    for step in r["steps"]:
        window = in_window(snaps, *step["window_unix"])
        assert len(window) == step["scrapes"] >= 5
        # what `--window` takes: seconds from the first scrape, holding the window's first and last scrape
        lo, hi = step["window"]
        assert in_window(snaps, t0 + lo, t0 + hi) == window and hi - lo < window[-1].t - window[0].t + 0.2
        got = measure(window).to_dict()
        for k in MEASURED:
            assert _close(got[k], step["vllm"][k]), (name, step["phase"], k, got[k], step["vllm"][k])


def test_slos_come_from_the_light_step_and_break_between_the_steps_named():
    for r in BY_NAME.values():
        light = r["steps"][r["light_step"]]["vllm"]
        assert r["slos"]["ttft_p95_s"] == float(f"{3 * light['ttft_p95_s']:.2g}")
        assert r["slos"]["itl_p50_s"] == float(f"{2 * light['itl_p50_s']:.2g}")
        assert r["slos"]["queue_time_p95_s"] == 1.0
        by_rate = sorted(r["steps"], key=lambda s: s["rate"])
        for key, objective in r["slos"].items():
            b = r["breaking"][key]
            if b["rate"] is None:
                continue
            below, above = b["between"]
            assert below <= b["rate"] <= above
            # where the quantity's logarithm, drawn straight between the two steps, meets the objective
            lo, hi = (next(s["vllm"][key] for s in by_rate if s["rate"] == x) for x in (below, above))
            share = math.log(objective / lo) / math.log(hi / lo)
            assert b["rate"] == pytest.approx(below + share * (above - below), abs=1e-4), (r["name"], key)
            for s in by_rate:
                v = s["vllm"][key]
                held = v is not None and v <= objective
                if s["rate"] <= below:
                    assert held, (r["name"], key, s["rate"])
                elif s["rate"] == above:
                    assert not held, (r["name"], key, s["rate"])


@pytest.mark.slow  # 3-10 s a ramp: the headroom bisects up to ×64 by simulation
@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_plan_on_the_light_step_alone_gives_every_slo_a_finite_headroom(name):
    r = BY_NAME[name]
    light = r["steps"][r["light_step"]]
    slos = [f"--slo={k[:-2]}={v:g}s" for k, v in r["slos"].items()]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(
            [
                "plan",
                str(FOLDER[name] / r["recording"]),
                "--window",
                "{:g}:{:g}".format(*light["window"]),
                *slos,
                "--max-num-seqs",
                str(r["max_num_seqs"]),
                "--json",
            ]
        )
    assert rc in (0, 1)
    doc = json.loads(out.getvalue())
    # ×1 is the light step's own traffic (Poisson arrivals: a short step's count is noisy)
    assert doc["current"]["requests_per_s"] == pytest.approx(light["rate"], rel=0.5)
    for key in r["slos"]:
        head = doc["current"]["headroom"][key]
        assert head is not None and 1.0 < head < MAX_LOAD, (key, head)  # every SLO breaks short of ×64
