"""The same report from a real Prometheus holding the fleet (backfilled with promtool) as from the recordings."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.export.openmetrics import export_openmetrics
from kvdoctor.report.build import build_report
from kvdoctor.report.economics import Prices
from kvdoctor.report.history import ReportError
from kvdoctor.report.promrange import from_prometheus
from kvdoctor.sources.client import PromClient
from tests.support.fleet import LAST_GRID, STEP_S, T0, Fleet
from tests.support.openmetrics import recordings_to_openmetrics
from tests.support.prometheus import PrometheusServer, backfill, binaries

PRICES = Prices(gpu_hour_usd=2.5, gpus_per_target=2, api_in_usd=0.5, api_out_usd=1.5)
COUNTED = {"vllm:request_success", "vllm:prompt_tokens", "vllm:generation_tokens"}

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(binaries() is None, reason="prometheus/promtool not installed"),
]


def _serve(fleet: Fleet, work: Path, extra: str) -> Iterator[str]:
    raw, om = work / "raw.om", work / "fleet.om"
    recs = [(str(p), p.name.removesuffix(".jsonl.gz"), 0.0) for p in fleet.paths]
    recordings_to_openmetrics(recs, raw, keep=lambda name: name in COUNTED)
    om.write_text(raw.read_text().removesuffix("# EOF\n") + extra + "# EOF\n")
    found = binaries()
    assert found is not None
    storage = work / "tsdb"
    backfill(om, storage, promtool=found[1])
    with PrometheusServer(storage, work, binary=found[0]) as server:
        yield server.url


@pytest.fixture(scope="module")
def prometheus(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus holding the fleet's raw vLLM counters and the kvdoctor_* series its replay exposed."""
    out = io.StringIO()
    export_openmetrics(fleet.cycles, out)
    yield from _serve(fleet, tmp_path_factory.mktemp("prom"), out.getvalue().removesuffix("# EOF\n"))


@pytest.fixture(scope="module")
def prometheus_pack(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus that ran the rule pack over the fleet (its kvdoctor:* series and ALERTS) but never saw kvdoctor."""
    out = io.StringIO()
    fleet.write_pack_series(out)
    yield from _serve(fleet, tmp_path_factory.mktemp("prom-pack"), out.getvalue())


def test_same_report_as_from_the_recordings(fleet: Fleet, prometheus: str, tmp_path: Path) -> None:
    want = build_report(fleet.history, PRICES, now=0).to_json()
    out = tmp_path / "r.json"
    args = [
        "report",
        "--prometheus-url",
        prometheus,
        "--start",
        str(T0),
        "--end",
        str(LAST_GRID),
        "--step",
        "60s",
        "--gpu-hour-cost",
        "2.5",
        "--gpus-per-target",
        "2",
        "--api-price-in",
        "0.5",
        "--api-price-out",
        "1.5",
        "--format",
        "json",
        "-o",
        str(out),
    ]
    assert main(args) == 0
    got = json.loads(out.read_text())
    assert got["source"] == f"Prometheus {prometheus}"
    for doc in (got, want):
        doc.pop("source"), doc.pop("generated")
    assert got["fleet"] == json.loads(json.dumps(want["fleet"]))
    assert got == json.loads(json.dumps(want))


def test_same_report_from_the_rule_packs_series_alone(fleet: Fleet, prometheus_pack: str) -> None:
    want = build_report(fleet.history, PRICES, now=0).to_json()
    history = from_prometheus(PromClient(prometheus_pack), T0, LAST_GRID, STEP_S)
    assert history.source.endswith("(classified from the rule pack's series)")
    got = build_report(history, PRICES, now=0).to_json()
    for doc in (got, want):
        doc.pop("source")
    assert got == want


def test_chunked_ranges_give_the_same_history(fleet: Fleet, prometheus: str) -> None:
    shown: list[tuple[int, int]] = []
    small = from_prometheus(
        PromClient(prometheus), T0, LAST_GRID, STEP_S, lambda d, n: shown.append((d, n)), chunk_points=100
    )
    whole = from_prometheus(PromClient(prometheus), T0, LAST_GRID, STEP_S)
    assert shown == [(1, 4), (2, 4), (3, 4), (4, 4)]  # 360 points in pieces of 100
    assert build_report(small, PRICES, now=0) == build_report(whole, PRICES, now=0)


def test_a_prometheus_without_kvdoctor_series_is_named(prometheus: str) -> None:
    with pytest.raises(
        ReportError,
        match=r"no kvdoctor_bottleneck_code series and no kvdoctor:\* recorded signals .* scrape `kvdoctor serve`",
    ):
        from_prometheus(PromClient(prometheus), T0 - 86400, T0 - 3600, STEP_S)


def test_cli_says_when_prometheus_is_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--prometheus-url", "http://127.0.0.1:9", "--since", "1h"]) == 3  # transport
    err = capsys.readouterr().err
    assert "cannot connect" in err and len(err.splitlines()) == 1


def test_no_progress_bar_when_stderr_is_not_a_terminal(
    prometheus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Three days: a range long enough for several query chunks, which once drew `\r` bars into any stderr.
    args = [
        "report",
        "--prometheus-url",
        prometheus,
        "--start",
        str(T0 - 3 * 86400),
        "--end",
        str(LAST_GRID),
        "--format",
        "json",
        "-o",
        str(tmp_path / "r.json"),
    ]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "querying Prometheus" not in err and "wrote" in err
