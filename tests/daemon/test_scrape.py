"""The scraper's connection pools: every pool it opened is closed once it stops, none left for the collector to find."""

from __future__ import annotations

import gc

import pytest

from kvdoctor.config import TargetSpec
from kvdoctor.daemon.scrape import Scraper
from tests.faults import GOOD, FaultServer


def test_a_pool_replaced_by_a_reload_is_closed_at_shutdown(caplog: pytest.LogCaptureFixture) -> None:
    server = FaultServer("static", GOOD.encode())
    spec = TargetSpec(url=server.url, name="t")
    scraper = Scraper(max_connections=4)
    try:
        assert scraper.scrape([spec])[0].error is None
        scraper.resize(8)  # a reload changed scrape.max_connections: the next scrape opens a new pool
        assert scraper.scrape([spec])[0].error is None
    finally:
        scraper.close()  # a shutdown within the minute the old pool is kept for scrapes still in flight
        server.stop()
    del scraper
    gc.collect()  # an unclosed pool says so when it is collected (asyncio logs it at ERROR)
    assert not [r.getMessage() for r in caplog.records if "Unclosed" in r.getMessage()]
