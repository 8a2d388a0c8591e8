"""Session fixtures: the recorded scenario, a backfilled loopback Prometheus, and kvdoctor's embedded store."""

from __future__ import annotations

import importlib
import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.openmetrics import Dataset, recordings_to_openmetrics
from tests.support.prometheus import PrometheusError, PrometheusServer, backfill, binaries
from tests.support.scenario import Scenario, build_scenario

pytestmark = pytest.mark.integration


def keep_family(name: str) -> bool:
    """Only vLLM's own families go into Prometheus (keeps backfill small); expressions use nothing else."""
    return name.startswith("vllm:")


@pytest.fixture(scope="session")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """Derived recordings on one timeline, and the query instants."""
    try:
        return build_scenario(tmp_path_factory.mktemp("recordings"))
    except FileNotFoundError as exc:
        pytest.skip(f"no vLLM recordings: {exc}")


@pytest.fixture(scope="session")
def dataset(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> tuple[Dataset, Path]:
    """The scenario parsed by prometheus_client, and the OpenMetrics file written from it."""
    out = tmp_path_factory.mktemp("openmetrics") / "scenario.om"
    data = recordings_to_openmetrics(scenario.recordings, out, keep=keep_family)
    return data, out


@pytest.fixture(scope="session")
def prometheus(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    """A real Prometheus serving the backfilled scenario on 127.0.0.1; stopped at the end of the session."""
    found = binaries()
    if found is None:
        pytest.skip("prometheus/promtool not on PATH (scripts/test.sh installs Debian's prometheus)")
    prom_bin, promtool = found
    dataset: tuple[Dataset, Path] = request.getfixturevalue("dataset")  # parsed only when Prometheus exists
    work = tmp_path_factory.mktemp("prometheus")
    storage = work / "tsdb"
    backfill(dataset[1], storage, promtool=promtool)
    server = PrometheusServer(storage, work, binary=prom_bin)
    server.start()
    try:
        last = (dataset[0].max_ms or 0) / 1000
        if not server.query('count({__name__=~"vllm:.+"})', last)["result"]:
            raise PrometheusError(f"backfilled blocks are not visible at {last:.3f}: {server.log()}")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def embedded() -> Any:
    """The `kvdoctor.query` module, or a skip while the lead has not written it."""
    if importlib.util.find_spec("kvdoctor.query") is None:
        pytest.skip("kvdoctor.query does not exist yet")
    return importlib.import_module("kvdoctor.query")


@pytest.fixture(scope="session")
def embedded_store(embedded: Any, scenario: Scenario) -> Any:
    """The embedded store over the same derived recordings (no staleness markers, like backfilled blocks)."""
    started = time.monotonic()
    store = embedded.load_store(scenario.recordings, job="vllm", staleness_markers=False)
    print(f"embedded load_store: {time.monotonic() - started:.2f} s")
    return store
