"""`kvdoctor report` on a six-hour synthetic fleet re-timed from real vLLM scrapes, checked against hand sums."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.cli import report as report_cli
from kvdoctor.report.build import build_report
from kvdoctor.report.document import Report
from kvdoctor.report.economics import Prices
from kvdoctor.report.history import History, ReportError
from tests.support.fleet import DIRS, HOURS, PLAN, STEP_S, T0, Fleet

PRICES = Prices(gpu_hour_usd=2.5, gpus_per_target=2, api_in_usd=0.5, api_out_usd=1.5)

pytestmark = [
    pytest.mark.skipif(not DIRS[""].exists(), reason="shared vLLM recordings not present"),
    pytest.mark.slow,  # one replay of 24 target-hours (~10 s of CPU) shared by the module
    # `kvdoctor report` on the fleet runs four times (each advisor simulating the same advice): once is enough
    pytest.mark.usefixtures("shared_predictions"),
]


@pytest.fixture(scope="module")
def report(fleet: Fleet) -> Report:
    return build_report(fleet.history, PRICES, now=T0 + 7 * 3600)


@pytest.fixture(scope="module")
def doc(report: Report) -> dict:  # type: ignore[type-arg]
    return report.to_json()  # what `--format json` prints


def by_target(doc: dict) -> dict[str, dict]:  # type: ignore[type-arg]
    return {e["target"]: e for e in doc["targets"]}


def test_tokens_and_requests_match_the_hand_sums(fleet: Fleet, doc: dict) -> None:  # type: ignore[type-arg]
    entries = by_target(doc)
    for name in PLAN:
        for what in ("requests", "prompt_tokens", "generation_tokens"):
            assert entries[name][what] == round(fleet.hand(name, what)), (name, what)
    assert entries["gpu-c"]["generation_tokens"] == 0
    assert entries["gpu-a"]["generation_tokens"] > 0  # its restart at the peak did not wipe the hour
    for what in ("requests", "generation_tokens"):
        assert doc["fleet"][what] == round(sum(fleet.hand(n, what) for n in PLAN))
    hourly = {round((h["start"] - T0) / 3600): h for h in doc["hourly"]}
    for hour in range(HOURS):
        want = sum(fleet.hand(n, "generation_tokens", hour) for n in PLAN)
        assert hourly[hour]["generation_tokens"] == round(want), hour


def test_hours_per_class(doc: dict) -> None:  # type: ignore[type-arg]
    e = by_target(doc)
    for name in PLAN:
        assert e[name]["hours"]["total"] == HOURS
    # a never-used target is idle throughout, but for its first evaluation: no verdict before a 15 s window exists
    c = e["gpu-c"]["hours"]
    assert c.get("unknown", 0) <= STEP_S / 3600 + 1e-4 and c["idle"] + c.get("unknown", 0) == pytest.approx(
        HOURS
    )
    assert e["gpu-c"]["idle_share"] == pytest.approx(c["idle"] / HOURS, abs=1e-4) and c["idle"] > HOURS - 0.02
    # class changes lag the traffic by a rule's `for`/`keep_firing_for`: a few minutes either way
    assert e["gpu-b"]["hours"]["batch_cap"] == pytest.approx(1.0, abs=0.1)
    assert e["gpu-d"]["hours"]["kv_cache"] == pytest.approx(1.0, abs=0.1)
    assert e["gpu-a"]["hours"]["healthy"] == pytest.approx(2.0, abs=0.1)
    for name, idle in (("gpu-a", 4.0), ("gpu-b", 4.0), ("gpu-d", 5.0)):
        assert e[name]["hours"]["idle"] == pytest.approx(idle, abs=0.1)
    assert doc["fleet"]["hours"]["total"] == 4 * HOURS
    assert doc["fleet"]["idle_share"] == pytest.approx((6 + 4 + 4 + 5) / 24, abs=0.01)
    assert doc["fleet"]["hours_without_traffic_share"] >= 3 / HOURS  # three full idle hours at least
    kv = e["gpu-d"]["kv_usage"]  # the recording's KV usage sat around 0.94 while requests waited
    assert kv["max"] == 1.0 and sum(kv["hours_by_bin"][17:]) >= 0.8  # ≥ 85 % for most of the peak hour
    assert sum(kv["hours_by_bin"]) == pytest.approx(HOURS, abs=0.05)
    util = e["gpu-b"]["running_over_cap"]  # at its cap while capped
    assert util["hours_by_bin"][-1] >= 0.8  # running at ≥ 95 % of the cap for most of the peak hour
    incidents = {(i["target"], i["class"]) for i in doc["incidents"]}
    assert incidents == {("gpu-b", "batch_cap"), ("gpu-d", "kv_cache")}


def test_cost_figures(fleet: Fleet, doc: dict) -> None:  # type: ignore[type-arg]
    f = doc["fleet"]
    gen = sum(fleet.hand(n, "generation_tokens") for n in PLAN)
    prompt = sum(fleet.hand(n, "prompt_tokens") for n in PLAN)
    assert f["gpu_hours"] == 4 * HOURS * 2
    assert f["cost_usd"] == 4 * HOURS * 2 * 2.5
    assert f["cost_per_1m_generation_tokens_usd"] == pytest.approx(120 / gen * 1e6, abs=1e-3)
    assert f["cost_per_1m_prompt_tokens_usd"] == pytest.approx(120 / prompt * 1e6, abs=1e-3)
    idle = sum(e["hours"]["idle"] for e in doc["targets"])
    assert f["cost_if_idle_unpaid_usd"] == pytest.approx((24 - idle) * 2 * 2.5, abs=0.01)
    api = prompt / 1e6 * 0.5 + gen / 1e6 * 1.5
    assert f["api_cost_usd"] == pytest.approx(api, abs=1e-3)
    assert f["break_even_traffic_multiple"] == pytest.approx(120 / api, rel=1e-3)
    # following the traffic: per model, each hour's tokens/s over what one replica sustained, with 20 % headroom
    expected_replica_hours = 0
    for model, names in (("tiny", ["gpu-a", "gpu-b", "gpu-c"]), ("tiny-mha", ["gpu-d"])):
        cap = doc["capacity"][model]["generation_tokens_per_s_per_replica"]
        for hour in range(HOURS):
            tps = sum(fleet.hand(n, "generation_tokens", hour) for n in names) / 3600
            expected_replica_hours += math.ceil(tps / (cap * 0.8)) if tps else 0
    assert f["gpu_hours_following_traffic"] == pytest.approx(expected_replica_hours * 2, abs=1e-3)
    assert f["cost_following_traffic_usd"] == pytest.approx(expected_replica_hours * 2 * 2.5, abs=0.01)


def test_replicas_and_idle_findings(fleet: Fleet, doc: dict) -> None:  # type: ignore[type-arg]
    f = doc["fleet"]
    tiny = doc["capacity"]["tiny"]
    assert tiny["basis"].startswith("measured")  # gpu-b saturated at its batch cap
    want = 0
    for model, names in (("tiny", ["gpu-a", "gpu-b", "gpu-c"]), ("tiny-mha", ["gpu-d"])):
        peak_tps = sum(fleet.hand(n, "generation_tokens", 3) for n in names) / 3600
        want += math.ceil(peak_tps / (doc["capacity"][model]["generation_tokens_per_s_per_replica"] * 0.8))
    # each model had one replica at its ceiling at the peak; 20 % headroom makes that two per model
    assert f["peak_replicas_needed"] == want == 4
    assert f["quiet_replicas_needed"] == 0  # nights had no traffic at all
    kinds = {r["kind"]: r for r in doc["recommendations"]}
    scale = kinds["scale_with_traffic"]
    assert scale["numbers"]["idle_replicas"] == 4 and scale["numbers"]["replicas"] == 4
    assert "scale to 0 off-peak" in scale["text"]
    assert scale["numbers"]["savings_usd"] == pytest.approx(
        f["cost_usd"] - f["cost_following_traffic_usd"], abs=0.01
    )
    assert (
        "gpu-b" in kinds["limit_batch_cap"]["text"] and "--max-num-seqs" in kinds["limit_batch_cap"]["text"]
    )
    assert "--kv-cache-dtype fp8" in kinds["limit_kv_cache"]["text"]
    assert kinds["economics"]["numbers"]["break_even_traffic_multiple"] > 1


def test_json_carries_the_documented_fields(fleet: Fleet, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    rc = main(["report", *map(str, fleet.paths[:2]), "--step", "60", "-o", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    for entry in [*doc["targets"], doc["fleet"]]:
        for key in (
            "hours",
            "requests",
            "prompt_tokens",
            "generation_tokens",
            "gpu_hours",
            "cost_usd",
            "cost_per_1m_generation_tokens_usd",
            "idle_share",
            "peak_replicas_needed",
            "quiet_replicas_needed",
        ):
            assert key in entry, key
        assert (
            entry["cost_usd"] is None and entry["cost_per_1m_generation_tokens_usd"] is None
        )  # no price given
        assert entry["hours"]["total"] == pytest.approx(
            sum(v for k, v in entry["hours"].items() if k != "total"), abs=1e-3
        )
    assert all(r["text"] and isinstance(r["numbers"], dict) for r in doc["recommendations"])
    assert any("--gpu-hour-cost" in n for n in doc["notes"])


def test_markdown_names_the_numbers(report: Report, doc: dict) -> None:  # type: ignore[type-arg]
    from kvdoctor.report.markdown import render_markdown

    md = render_markdown(report)
    f = doc["fleet"]
    assert f"**{f['generation_tokens']:,}** generation tokens" in md
    assert "| gpu-b | tiny |" in md and "batch_cap" in md
    assert f"${f['cost_usd']:,.2f}" in md


def test_bad_input_gets_a_clear_message(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = list(map(str, fleet.paths))
    assert main(["report", *paths, "--gpu-hour-cost", "2/h"]) == 2
    assert "--gpu-hour-cost '2/h': expected a price in US dollars" in capsys.readouterr().err
    assert main(["report", *paths, "--gpu-hour-cost", "2EUR"]) == 2
    assert "no other currency" in capsys.readouterr().err
    assert main(["report", *paths, "--api-price-in", "1"]) == 2
    assert "--api-price-in and --api-price-out go together" in capsys.readouterr().err
    with pytest.raises(
        ReportError, match="unknown target 'gpu-z': the range holds gpu-a, gpu-b, gpu-c, gpu-d"
    ):
        build_report(fleet.history, PRICES, ["gpu-z"])
    idle = build_report(
        fleet.history, PRICES, ["gpu-c"]
    ).to_json()  # an idle target alone: its hours, no error
    assert idle["fleet"]["requests"] == 0 and idle["fleet"]["cost_usd"] > 0
    with pytest.raises(ReportError, match="no kvdoctor history"):
        build_report(History("empty"), PRICES)
    assert main(["report", str(tmp_path / "missing.jsonl.gz")]) == 2
    assert "missing.jsonl.gz: no such file" in capsys.readouterr().err
    assert main(["report"]) == 2
    assert "give RECORDING… or --prometheus-url URL" in capsys.readouterr().err
    assert main(["report", "--prometheus-url", "http://127.0.0.1:9", "--start", "yesterday"]) == 2
    assert "--start 'yesterday': expected unix seconds or RFC 3339" in capsys.readouterr().err


def test_output_path_errors_name_the_file_and_write_nothing(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = list(map(str, fleet.paths))
    missing = tmp_path / "no-such-dir" / "week.html"
    replayed: list[object] = []
    real = report_cli.from_recordings
    monkeypatch.setattr(report_cli, "from_recordings", lambda *a, **k: replayed.append(a) or real(*a, **k))
    assert main(["report", *paths, "-o", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"-o {missing}: No such file or directory" in err and "Traceback" not in err
    assert main(["report", *paths, "-o", str(tmp_path / "week.pdf")]) == 2
    assert "the suffix picks the format, give .html, .md or .json" in capsys.readouterr().err
    assert not (tmp_path / "week.pdf").exists()
    assert replayed == []  # both refused before minutes of replay, not after
    assert main(["report", *paths, "-o", str(tmp_path / "week.txt"), "--format", "md"]) == 0
    assert (tmp_path / "week.txt").read_text(encoding="utf-8").startswith("# kvdoctor capacity review")


def test_traffic_shape_by_hour_of_day(fleet: Fleet, doc: dict) -> None:  # type: ignore[type-arg]
    hod = doc["fleet"]["traffic"]["hour_of_day"]
    # T0 is 01:00 UTC on a Monday: six observed hours, 01:00-06:00, the peak at 04:00
    assert [i for i, v in enumerate(hod) if v is not None] == [1, 2, 3, 4, 5, 6]
    peak = sum(fleet.hand(n, "generation_tokens", 3) for n in PLAN) / 3600
    assert hod[4] == pytest.approx(peak, abs=1e-3) and max(hod[i] or 0 for i in range(24)) == hod[4]
    assert doc["fleet"]["traffic"]["day_of_week"]["Mon"] is not None
    assert doc["fleet"]["traffic"]["day_of_week"]["Tue"] is None
    assert by_target(doc)["gpu-b"]["traffic"]["hour_of_day"][4] == pytest.approx(
        fleet.hand("gpu-b", "generation_tokens", 3) / 3600, abs=1e-3
    )


def test_history_survives_the_state_file_round_trip(fleet: Fleet, doc: dict) -> None:  # type: ignore[type-arg]
    again = History.from_state(json.loads(json.dumps(fleet.history.to_state())))
    assert build_report(again, PRICES, now=T0 + 7 * 3600).to_json() == doc


def test_daemon_history_from_diagnoses_integrates_rates(fleet: Fleet) -> None:
    h = History("daemon")
    for c in fleet.cycles:
        h.observe(c.diagnoses, c.t, STEP_S)
    doc = build_report(h, PRICES).to_json()
    gen = by_target(doc)["gpu-b"]["generation_tokens"]
    assert gen == pytest.approx(fleet.hand("gpu-b", "generation_tokens"), rel=0.1)  # 1m rates × interval
    assert by_target(doc)["gpu-b"]["hours"]["batch_cap"] == pytest.approx(1.0, abs=0.1)
