"""The HTML report in headless Chromium: opens from a file with no network, draws every chart with data."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kvdoctor.report.build import build_report
from kvdoctor.report.economics import Prices
from kvdoctor.report.page import CHARTS, render_html
from tests.support.chromium import chromium as support_chromium
from tests.support.fleet import T0, Fleet

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed"),
]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # --enable-logging=stderr prints every console message (and uncaught error) as a CONSOLE line
    return support_chromium(tmp_path, "--enable-logging=stderr", "--v=0", *args)


def console(run: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in run.stderr.splitlines() if "CONSOLE" in line]


@pytest.fixture(scope="module")
def page(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:  # type: ignore[type-arg]
    doc = build_report(fleet.history, Prices(2.5, 2, 0.5, 1.5), now=T0 + 7 * 3600)
    path = tmp_path_factory.mktemp("page") / "report.html"
    path.write_text(render_html(doc), encoding="utf-8")
    return path, doc.to_json()


def chart_state(tmp_path: Path, path: Path, *extra: str) -> tuple[dict, subprocess.CompletedProcess[str]]:  # type: ignore[type-arg]
    run = chromium(tmp_path, "--window-size=1400,1000", *extra, "--dump-dom", path.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    m = re.search(r'<pre id="chart-state"[^>]*>(.*?)</pre>', run.stdout, re.S)
    assert m, run.stdout[-2000:]
    return json.loads(m.group(1).replace("&quot;", '"')), run


def test_every_chart_has_data_and_no_console_errors(page: tuple[Path, dict], tmp_path: Path) -> None:  # type: ignore[type-arg]
    path, doc = page
    state, run = chart_state(tmp_path, path)
    assert console(run) == []
    assert set(state) == set(CHARTS)
    for cid, s in state.items():
        assert "error" not in s, (cid, s)
        assert s["datasets"] >= 1 and s["points"] >= 1, (cid, s)
    # the timeline draws one bar per class segment, the heat map one cell per observed hour
    assert state["timeline"]["points"] == sum(len(k["segments"]) for k in doc["timeline"])
    assert state["heatmap"]["points"] == len(doc["fleet"]["traffic"]["heatmap"]) == 6
    assert state["throughput"]["datasets"] == 2  # tokens/s and the replicas' sustained capacity


def test_the_page_needs_no_network(page: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    path, _ = page
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)
    assert "@import" not in text and "fonts.googleapis" not in text
    assert "Chart.js v4.6.1" in text and "chartjs-chart-matrix v3.1.0" in text  # the vendored libraries


def test_layout_screenshot(page: tuple[Path, dict], tmp_path: Path) -> None:  # type: ignore[type-arg]
    path, _ = page
    state, _ = chart_state(tmp_path, path)
    r = {cid: s["rect"] for cid, s in state.items()}
    # timeline and cost span the width; throughput and heat map share a row below the timeline
    assert r["timeline"]["width"] > 1200 and r["cost"]["width"] > 1200
    assert r["throughput"]["y"] == r["heatmap"]["y"] > r["timeline"]["y"] + r["timeline"]["height"]
    assert r["throughput"]["x"] + r["throughput"]["width"] < r["heatmap"]["x"]
    assert r["cost"]["y"] > r["heatmap"]["y"] + r["heatmap"]["height"]
    assert all(s["height"] >= 200 for s in r.values())
    png = tmp_path / "report.png"
    run = chromium(
        tmp_path, f"--screenshot={png}", "--window-size=1400,2200", "--hide-scrollbars", path.as_uri()
    )
    assert run.returncode == 0 and png.exists(), run.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1400, 2200)
    assert len(data) > 100_000  # charts and tables; a blank or error page compresses to a few kB
