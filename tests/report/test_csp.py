"""The daemon's /report under the daemon's own Content-Security-Policy, in headless Chromium: charts, no errors."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from kvdoctor.config import Config
from kvdoctor.daemon.runner import Daemon
from kvdoctor.report.history import History
from kvdoctor.report.page import ASSETS, CHARTS
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.verdicts import Diagnosis, Finding
from tests.support.chromium import chromium

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
T0 = 1796000400.0


def fill(history: History) -> None:
    """Three hours of one target: healthy, KV-bound for half an hour, healthy again."""
    ev = {
        "requests_per_s": 2.0,
        "generation_tokens_per_s": 400.0,
        "prompt_tokens_per_s": 900.0,
        "kv_usage": 0.5,
        "running": 8.0,
        "batch_cap_configured": 64.0,
    }
    for k in range(720):
        t = T0 + 15 * k
        bound = 300 <= k < 420
        e = {**ev, "kv_usage": 0.97} if bound else ev
        findings = (
            [Finding("kv_cache", "warning", "KV full", "", e, bottleneck="kv_cache", since=T0)]
            if bound
            else []
        )
        history.observe(
            [Diagnosis("vllm-a:8000", "llama", t, "kv_cache" if bound else "healthy", T0, findings, e)],
            t,
            15.0,
        )


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    d = Daemon(Config(targets=[], listen="127.0.0.1:0"), load_files(default_rule_files()))
    fill(d.history)
    d.start()
    yield d
    d.shutdown()


def _url(d: Daemon, path: str) -> str:
    assert d.web is not None
    host, port = d.web.address
    return f"http://{host}:{port}{path}"


def test_report_page_links_its_scripts_and_styles_which_the_daemon_serves(daemon: Daemon) -> None:
    r = requests.get(_url(daemon, "/report"), timeout=10)
    assert r.status_code == 200 and "script-src 'self'" in r.headers["Content-Security-Policy"]
    page = r.text
    assert "<style" not in page and not re.search(r"<script(?![^>]*\b(src|type=\"application/json\"))", page)
    assert not re.search(r"<[^>]+\s(style|on\w+)=", page)  # no inline style or handler attributes either
    for name, ctype in ASSETS.items():
        a = requests.get(_url(daemon, f"/report/static/{name}"), timeout=10)
        assert a.status_code == 200 and a.headers["Content-Type"] == ctype and len(a.content) > 100, name
        again = requests.get(
            _url(daemon, f"/report/static/{name}"), headers={"If-None-Match": a.headers["ETag"]}
        )
        assert again.status_code == 304
    for bad in (
        "/report/static/../page.py",
        "/report/static/nope.js",
        "/report/static/",
        "/report/static/static/report.js",
    ):
        assert requests.get(_url(daemon, bad), timeout=10).status_code == 404, bad
    assert requests.post(_url(daemon, "/report/static/report.js"), timeout=10).status_code == 405


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_the_daemons_report_draws_its_charts_under_its_csp_with_no_console_error(
    daemon: Daemon, tmp_path: Path
) -> None:
    run = chromium(
        tmp_path,
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1400,1000",
        "--dump-dom",
        _url(daemon, "/report"),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert [ln for ln in run.stderr.splitlines() if "CONSOLE" in ln] == []
    m = re.search(r'<pre id="chart-state"[^>]*>(.*?)</pre>', run.stdout, re.S)
    assert m, run.stdout[-2000:]
    state = json.loads(m.group(1).replace("&quot;", '"'))
    assert set(state) == set(CHARTS)
    for cid, s in state.items():
        assert "error" not in s and s["datasets"] >= 1 and s["points"] >= 1, (cid, s)
    # styled: the stylesheet loaded (the charts sit in a grid; unstyled they would all be full width)
    assert state["throughput"]["rect"]["width"] < 1000
