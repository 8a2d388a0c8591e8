"""The Prometheus-source daemon gives the same diagnoses as the scrape source, on the same live recordings.

Three ReplayServers serve real vLLM 0.32 recordings (started mid-recording, so each is in its labelled state within
the test's minute). A real Prometheus scrapes them every second with the exported rule pack (`kvdoctor rules export
--interval 1s`); kvdoctor's scrape-source daemon scrapes the same servers, and a Prometheus-source daemon queries
that Prometheus. Targets are named host:port on both sides (Prometheus' `instance`).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from kvdoctor.cli import main
from kvdoctor.config import Config, TargetSpec
from kvdoctor.config.schema import PrometheusSource
from kvdoctor.daemon.runner import Daemon
from kvdoctor.replayserver import Playlist, ReplayServer
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.sources.prometheus import QUERIES
from tests.support.prometheus import PrometheusError, binaries, free_port
from tests.support.wait import until

pytestmark = pytest.mark.integration

# recording -> (start offset in s, the class its labelled window holds); offsets put minute 1 in that window
RECORDINGS = {"kv_bound": (40.0, "kv_cache"), "batch_cap": (25.0, "batch_cap"), "healthy": (22.0, "healthy")}
RUN_S = 65.0


def _scraped_all(url: str, n: int) -> bool:
    query = urllib.parse.urlencode({"query": "count(up == 1)"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=2) as resp:
        result = json.load(resp)["data"]["result"]
    return bool(result) and float(result[0]["value"][1]) >= n


def _start_prometheus(work: Path, instances: list[str], prom_bin: str) -> tuple[subprocess.Popen[bytes], str]:
    assert main(["rules", "export", "--interval", "1s", "-o", str(work / "rules")]) == 0
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(work / "rules" / "kvdoctor.yml")],
        "scrape_configs": [{"job_name": "vllm", "static_configs": [{"targets": instances}]}],
    }
    (work / "prometheus.yml").write_text(json.dumps(config))
    port = free_port()
    cmd = [
        prom_bin,
        f"--config.file={work / 'prometheus.yml'}",
        f"--storage.tsdb.path={work / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with (work / "prometheus.log").open("ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        with urllib.request.urlopen(url + "/-/ready", timeout=2) as resp:
            # both sources start from the same history: Prometheus applies new targets up to 5 s late
            return resp.status == 200 and _scraped_all(url, len(instances))

    try:
        until(ready, timeout=30, step=0.2, ignore=(OSError,))
    except AssertionError:
        proc.terminate()
        raise PrometheusError(
            f"prometheus did not become ready: {(work / 'prometheus.log').read_text()[-2000:]}"
        ) from None
    return proc, url


@pytest.fixture
def fleet(shared_032: Path, tmp_path: Path) -> Iterator[tuple[dict[str, str], str]]:
    """instance -> recording name, and the URL of a Prometheus scraping them with the pack loaded."""
    found = binaries()
    if found is None:
        pytest.skip("prometheus/promtool not on PATH (scripts/test.sh installs Debian's prometheus)")
    servers = {
        name: ReplayServer(Playlist([shared_032 / f"{name}.jsonl.gz"], start_offset_s=offset)).start()
        for name, (offset, _) in RECORDINGS.items()
    }
    instances = {s.url.split("/")[2]: name for name, s in servers.items()}
    proc = None
    try:
        proc, url = _start_prometheus(tmp_path, list(instances), found[0])
        yield instances, url
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        for s in servers.values():
            s.stop()


def _view(diagnoses: list[Any]) -> dict[str, tuple[str, list[str]]]:
    return {d.target: (d.bottleneck, sorted(f.name for f in d.findings)) for d in diagnoses if d.model_name}


@pytest.mark.slow  # a real Prometheus scrapes replayed servers for a minute
def test_prometheus_source_matches_scrape_source(fleet: tuple[dict[str, str], str]) -> None:
    instances, url = fleet
    groups = load_files(default_rule_files())
    specs = [TargetSpec(url=f"http://{i}/metrics") for i in instances]
    assert [s.name for s in specs] == list(instances)  # host:port, as Prometheus names the instance
    scrape = Daemon(Config(targets=specs, interval_s=1.0), groups)
    prom = Daemon(Config(source="prometheus", prometheus=PrometheusSource(url), interval_s=1.0), groups)
    start = time.monotonic()
    pace = threading.Event()
    agree = total = 0
    try:
        while True:
            tick = time.monotonic()
            a, b = _view(scrape.cycle()), _view(prom.cycle())
            if tick - start > 15:
                total += 1
                agree += a == b
            if tick - start >= RUN_S and a == b:
                break
            assert tick - start < RUN_S + 10, (
                f"still disagreeing after {RUN_S + 10:.0f}s:\nscrape {a}\nprometheus {b}"
            )
            # one cycle a second as the daemon would: the replayed servers and Prometheus move on in real time
            pace.wait(max(0.0, 1.0 - (time.monotonic() - tick)))
    finally:
        scrape.shutdown()
        prom.shutdown()
    # the same answer at the end, and nearly always on the way (scrape instants differ by up to a second)
    assert agree >= 0.9 * total, f"agreed on {agree} of {total} cycles"
    for instance, name in instances.items():
        assert b[instance][0] == RECORDINGS[name][1], (name, a, b)
    models = {(d.target, d.model_name) for d in prom.state.snapshot().diagnoses}
    assert models == {(d.target, d.model_name) for d in scrape.state.snapshot().diagnoses}
    # the engine's own capacity, read from cache_config_info through Prometheus, is the same number
    live_s = {n: st.live.kv_cache_tokens for n, st in scrape.pipeline.targets.items() if st.live}
    live_p = {n: st.live.kv_cache_tokens for n, st in prom.pipeline.targets.items() if st.live}
    assert live_p == live_s and all(live_p.values())
    assert all(not st.missing for st in prom.pipeline.targets.values())
    # a fixed number of queries per cycle: four reads plus one per alerting rule
    alerts = sum(r.kind == "alert" for g in groups for r in g.rules)
    assert prom.source.status().last_cycle_queries == len(QUERIES) + alerts
    text = generate_latest(prom.registry).decode()
    assert f"kvdoctor_source_cycle_queries {float(len(QUERIES) + alerts)}" in text
    assert "kvdoctor_source_up 1.0" in text and "kvdoctor_bottleneck_code{" in text
    stats = prom.state.snapshot().targets
    assert set(stats) == set(instances) and all(s.up for s in stats.values())
