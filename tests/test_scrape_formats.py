"""Scraping a real HTTP endpoint: the format follows the response's Content-Type, and a target that stays broken
is warned about once per cause, not once per cycle because a value in its bad line moved."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvdoctor.config import Config, TargetSpec
from kvdoctor.daemon.runner import Daemon
from kvdoctor.daemon.scrape import Scraper
from kvdoctor.rules.loader import default_rule_files, load_files

OM_PAGE = (
    "# TYPE vllm:request_success counter\n"
    'vllm:request_success_total{model_name="m"} 5 1700000000.5 # {trace_id="a1"} 1.0 1700000000.1\n'
    'vllm:request_success_created{model_name="m"} 1699999000.0\n'
    "# EOF\n"
)


class PageServer:
    """Serves what `page(n)` returns for the n-th request, with the given Content-Type."""

    def __init__(self, page, content_type: str) -> None:  # type: ignore[no-untyped-def]
        counter = itertools.count()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = page(next(counter)).encode()
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def scraper() -> Iterator[Scraper]:
    s = Scraper(max_connections=4)
    yield s
    s.close()


def test_an_openmetrics_response_is_read_as_openmetrics(scraper):
    server = PageServer(lambda n: OM_PAGE, "application/openmetrics-text; version=1.0.0; charset=utf-8")
    try:
        (result,) = scraper.scrape([TargetSpec(url=server.url, name="om")])
    finally:
        server.stop()
    assert result.error is None and result.scrape is not None
    # seconds in OpenMetrics, the exemplar dropped, the _created series too
    assert [(s.name, s.value, s.timestamp_ms) for s in result.scrape.samples] == [
        ("vllm:request_success_total", 5.0, 1700000000500)
    ]


def test_a_text_response_keeps_millisecond_timestamps_and_refuses_an_infinite_one(scraper):
    server = PageServer(
        lambda n: "a 1 1700000000500\n" if n == 0 else "a 1\nb 2 +Inf\n", "text/plain; version=0.0.4"
    )
    try:
        (first,) = scraper.scrape([TargetSpec(url=server.url, name="text")])
        (second,) = scraper.scrape([TargetSpec(url=server.url, name="text")])
    finally:
        server.stop()
    assert first.scrape is not None and first.scrape.samples[0].timestamp_ms == 1700000000500
    assert second.scrape is None and second.error is not None
    assert "line 2: timestamp +Inf is not a finite number" in second.error


def test_a_broken_target_is_warned_about_once_per_cause(caplog):
    # The bad line carries a counter that moves each scrape: its message changes, its cause does not.
    def page(n: int) -> str:
        if n < 3:
            return f'vllm:request_success_total{{model_name="m"}} {n} # {{oops}} 1\n'
        return 'vllm:num_requests_running{model_name="m"} 1\nbad line here\n'

    server = PageServer(page, "text/plain; version=0.0.4")
    d = Daemon(
        Config(targets=[TargetSpec(url=server.url, name="t")], interval_s=5.0),
        load_files(default_rule_files()),
    )
    try:
        with caplog.at_level(logging.DEBUG, logger="kvdoctor"):
            for _ in range(5):
                d.cycle()
    finally:
        d.shutdown()
        server.stop()
    warned = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "target t down" in r.getMessage()
    ]
    assert len(warned) == 2, warned  # one for the exemplar, one when the cause became a bad value
    assert "invalid exemplar" in warned[0] and "invalid sample" in warned[1]
    assert d.pipeline.targets["t"].last_error.endswith(
        "'bad line here'"
    )  # the page still shows the whole error
