"""Fast checks of the report's pieces: wall-clock rates, range chunks, the progress bar, prices and times."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.cli.report import parse_time
from kvdoctor.report.build import build_report
from kvdoctor.report.economics import Prices, parse_usd, replicas_for
from kvdoctor.report.history import History
from kvdoctor.report.markdown import render_markdown
from kvdoctor.report.promrange import MAX_POINTS, chunks, progress_bar
from kvdoctor.report.steps import Step

T0 = 1796000400.0  # Monday 2026-11-30 01:00 UTC


def test_replicas_that_take_turns_are_not_counted_as_running_together() -> None:
    # one replica serves the first half hour, another the second: the fleet ran one hour, not half an hour twice
    h = History("hand-made")
    for i in range(30):
        h.add("first", "m", Step(T0 + 60 * i, 60.0, "healthy", generation_tokens=60.0, gen_tps=1.0))
        h.add("second", "m", Step(T0 + 1800 + 60 * i, 60.0, "healthy", generation_tokens=120.0, gen_tps=2.0))
    doc = build_report(h, Prices()).to_json()
    f = doc["fleet"]
    assert f["generation_tokens"] == 30 * 60 + 30 * 120
    assert f["generation_tokens_per_s"] == pytest.approx((30 * 60 + 30 * 120) / 3600)
    assert doc["hourly"][0]["generation_tokens_per_s"] == pytest.approx(1.5)
    assert f["gpu_hours"] == 1.0  # each paid for the half hour it was up


def test_chunks_stay_under_the_points_limit() -> None:
    week = chunks(0, 7 * 86400, 1.0, points=10**9)  # a week at 1 s steps asked for in one piece
    assert all((b - a) / 1.0 + 1 < MAX_POINTS for a, b in week)
    assert week[0][0] == 0 and week[-1][1] == 7 * 86400
    assert all(week[i + 1][0] - week[i][1] == 1.0 for i in range(len(week) - 1))


def test_progress_bar_draws_on_one_line() -> None:
    out = io.StringIO()
    show = progress_bar(out)
    show(1, 4)
    show(4, 4)
    assert out.getvalue() == (
        "\rquerying Prometheus [########......................] 1/4 chunks"
        "\rquerying Prometheus [##############################] 4/4 chunks\n"
    )


@pytest.mark.parametrize("text", ["2/h", "2EUR", "€2", "-1", "2 per hour", ""])
def test_a_price_with_a_unit_or_currency_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"--gpu-hour-cost .*expected a price in US dollars"):
        parse_usd("--gpu-hour-cost", text)


@pytest.mark.parametrize(("text", "usd"), [("2.49", 2.49), ("$2.49", 2.49), ("2.49USD", 2.49), (".5", 0.5)])
def test_dollar_prices(text: str, usd: float) -> None:
    assert parse_usd("--gpu-hour-cost", text) == usd


def test_times_and_replicas() -> None:
    assert parse_time("--start", "2026-11-30T01:00:00Z") == T0
    assert parse_time("--start", str(T0)) == T0
    with pytest.raises(ValueError, match="give a time zone"):
        parse_time("--start", "2026-11-30T01:00:00")
    assert replicas_for(0.0, 10.0, 0.2) == 0  # no traffic: scale to zero
    assert replicas_for(8.0, 10.0, 0.2) == 1  # exactly at 80 % of one replica
    assert replicas_for(8.1, 10.0, 0.2) == 2
    assert replicas_for(5.0, None, 0.2) is None  # no capacity known, no count made up


def test_short_ranges_keep_gpu_hours_apart_in_the_advice(
    shared_032: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # three targets, two of them needed in quiet hours: the scaling advice is given (each charged its own span)
    recs = [str(shared_032 / f"{n}.jsonl.gz") for n in ("kv_bound", "idle", "batch_cap")]
    assert main(["report", *recs, "--format", "json", "--gpu-hour-cost", "2.49"]) == 0
    doc = json.loads(capsys.readouterr().out)
    f = doc["fleet"]
    text = next(r["text"] for r in doc["recommendations"] if "Following the traffic" in r["text"])
    assert f"{f['gpu_hours_following_traffic']:.2f} GPU-hours instead of {f['gpu_hours']:.2f}" in text
    assert "save $-" not in text  # following the traffic here costs more: it says so


def test_report_help_does_not_mention_a_source_flag_it_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = capsys.readouterr().out
    assert "--prometheus-url URL" in out and "--source" not in out and "instead of scraping" not in out


def test_busiest_hour_without_an_itl_baseline_says_so(
    shared_032: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(shared_032 / "compute_bound.jsonl.gz"), "--format", "md"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Busiest hour"))
    assert "no ITL baseline learned yet" in line and "–×" not in line, line


def test_running_over_cap_is_unknown_where_no_cap_is_known() -> None:
    h = History("hand-made")
    for i in range(10):
        h.add("nocap", "m", Step(T0 + 60 * i, 60.0, "healthy", generation_tokens=60.0, running=3.0))
        h.add(
            "capped", "m", Step(T0 + 60 * i, 60.0, "batch_cap", generation_tokens=60.0, running=4.0, cap=4.0)
        )
    report = build_report(h, Prices())
    by = {e["target"]: e for e in report.to_json()["targets"]}
    assert by["nocap"]["running_over_cap"]["max"] is None  # not "0 %" of a cap nobody knows
    assert by["capped"]["running_over_cap"]["max"] == 1.0
    md = render_markdown(report)
    traffic = md[md.index("## Traffic and capacity use") :]
    row = next(x for x in traffic.splitlines() if x.startswith("| nocap |"))
    assert row.split("|")[10].strip() == "–"
