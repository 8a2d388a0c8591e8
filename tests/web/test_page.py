"""The status page rendered by headless Chromium against a live server holding real diagnoses."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from kvdoctor.signals import SIGNALS
from kvdoctor.status.exposition import make_registry
from kvdoctor.status.state import DaemonState
from kvdoctor.web import WebServer
from tests.support.chromium import CHROMIUM, Cards, chromium
from tests.web_support import DOWN, DOWN_ERROR, RECORDINGS, build_state


@pytest.fixture(scope="module")
def page() -> Iterator[tuple[str, DaemonState]]:
    state = build_state()
    server = WebServer(state, make_registry(state), listen="127.0.0.1:0")
    server.start()
    yield server.url, state
    server.stop()


def expected_numbers(state: DaemonState) -> dict[str, list[str]]:
    """The evidence as the page must show it, computed from the diagnoses themselves."""
    ev = {d.target: d.evidence for d in state.snapshot().diagnoses}
    kv, cap = ev["kv_bound"], ev["batch_cap"]
    return {
        "kv_bound": [
            f"{round(kv['kv_usage'] * 100)} %",
            f"{kv['preemptions_per_s']:.1f}/s",
            f"{kv['ttft_p95_s']:.1f} s",
            f"{kv['itl_p50_s'] * 1000:.1f} ms",
        ],
        "batch_cap": [
            f"{cap['running_max_1m']:.0f} / cap {cap['batch_cap_inferred']:.0f}",
            f"{round(cap['waiting_avg_1m'])} waiting",
        ],
    }


@pytest.mark.integration
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
@pytest.mark.skipif(not RECORDINGS.exists(), reason="shared vLLM recordings not present")
def test_page_renders_every_target(page: tuple[str, DaemonState], tmp_path: Path) -> None:
    url, state = page
    run = chromium(tmp_path, "--dump-dom", url)
    assert run.returncode == 0, run.stderr[-2000:]
    parser = Cards()
    parser.feed(run.stdout)
    cards = parser.cards
    assert set(cards) == {"kv_bound", "batch_cap", "healthy", DOWN}, run.stdout[:3000]
    for target, badge in (("kv_bound", "kv_cache"), ("batch_cap", "batch_cap"), ("healthy", "healthy")):
        assert cards[target]["bottleneck"] == badge
        assert f"badge-{badge}" in cards[target]["classes"]
        assert cards[target]["svg"] >= 3, target
    assert cards[DOWN]["svg"] >= 3
    assert {"badge-down", "card-down"} <= cards[DOWN]["classes"]
    assert DOWN_ERROR in cards[DOWN]["text"] and "scrape failed" in cards[DOWN]["text"]
    for target, numbers in expected_numbers(state).items():
        text = re.sub(r"\s+", " ", cards[target]["text"])
        for n in numbers:
            assert n in text, (target, n, text[:1500])
    # the charts are the registry's: every chart title, with its series' labels in the legend
    charts = {s.chart for s in SIGNALS.values() if s.chart}
    assert charts and cards["kv_bound"]["svg"] >= len(charts)
    for title in charts:
        assert title in cards["kv_bound"]["text"], title
    for key in ("kv_usage", "running", "waiting", "ttft_p95_s"):
        assert (SIGNALS[key].short or SIGNALS[key].label) in cards["kv_bound"]["text"], key
    assert "--kv-cache-dtype" in cards["kv_bound"]["text"]
    assert "--max-num-seqs" in cards["batch_cap"]["text"]
    assert "Cannot reach kvdoctor" not in run.stdout
    # worst first: the down target, then the KV-bound one
    assert list(cards)[:2] == [DOWN, "kv_bound"]


@pytest.mark.integration
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
@pytest.mark.skipif(not RECORDINGS.exists(), reason="shared vLLM recordings not present")
def test_page_screenshot(page: tuple[str, DaemonState], tmp_path: Path) -> None:
    url, _ = page
    png = tmp_path / "page.png"
    run = chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,1000", "--hide-scrollbars", url)
    assert run.returncode == 0 and png.exists(), run.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1400, 1000)
    assert len(data) > 50_000  # a blank or error page compresses to a few kB


def test_page_fetches_nothing_from_outside() -> None:
    static = resources.files("kvdoctor.web").joinpath("static")
    for name in ("index.html", "app.js", "style.css"):
        text = static.joinpath(name).read_text(encoding="utf-8")
        urls = set(re.findall(r"https?://[^\s\"'`)]+", text)) - {"http://www.w3.org/2000/svg"}
        assert not urls, (name, urls)
        assert "@import" not in text and "fonts.googleapis" not in text
