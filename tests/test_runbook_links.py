"""Every runbook link a running daemon emits (API, status page, Slack, Alertmanager) resolves to its section."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from kvdoctor.config import Config, TargetSpec
from kvdoctor.daemon.runner import Daemon
from kvdoctor.ingest.fetch import HttpOptions
from kvdoctor.replayserver import Playlist, ReplayServer
from kvdoctor.rules.loader import default_rule_files, load_files
from tests.faults import GOOD, refused_url
from tests.notify_support.alertmanager import running_alertmanager
from tests.notify_support.fake_slack import FakeSlack
from tests.notify_support.http_recorder import Recorder
from tests.support.chromium import CHROMIUM, Ids, chromium
from tests.support.wait import until

FAST = HttpOptions(connect_timeout=0.5, read_timeout=1.0, total_timeout=1.5)
pytestmark = [pytest.mark.integration, pytest.mark.slow]


class PartialVllm:
    """A /metrics that has running requests but none of the other families a diagnosis needs."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = GOOD.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def wait_for(what: str, pred: Any, timeout: float = 40.0) -> Any:
    return until(pred, timeout=timeout, step=0.2, what=what)


def findings_of(daemon: Daemon) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for d in daemon.state.snapshot().diagnoses:
        out.setdefault(d.target, set()).update(f.name for f in d.findings)
    return out


@pytest.fixture(scope="module")
def stack(
    shared_032: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Daemon, FakeSlack, Recorder]]:
    """A daemon on 127.0.0.1:0 (no external URL configured) watching a KV-bound, a dead and a partial target."""
    tmp = tmp_path_factory.mktemp("runbook")
    kv = ReplayServer(Playlist([shared_032 / "kv_bound.jsonl.gz"], start_offset_s=40, loop=True)).start()
    partial, slack = PartialVllm(), FakeSlack()
    try:
        with running_alertmanager(tmp) as (am_url, hook):
            targets = [
                TargetSpec(url=kv.url, name="gpu-kv"),
                TargetSpec(url=refused_url(), name="gpu-down", http=FAST),
                TargetSpec(url=partial.url, name="gpu-partial", http=FAST),
            ]
            notify = {
                "for": "0s",
                "slack": {"webhook_url": slack.webhook_url()},
                "alertmanager": {"url": am_url},
            }
            cfg = Config(
                targets=targets,
                interval_s=1.0,
                listen="127.0.0.1:0",
                notify=notify,
                state_file=str(tmp / "state.json"),
            )  # notification state too, apart from other runs
            daemon = Daemon(cfg, load_files(default_rule_files()))
            daemon.start()
            try:
                wanted = {"gpu-kv": "kv_cache", "gpu-down": "target_down", "gpu-partial": "metrics_missing"}
                wait_for(
                    "the three findings",
                    lambda: all(f in findings_of(daemon).get(t, set()) for t, f in wanted.items()),
                )
                wait_for("Slack messages for each target", lambda: len(slack_links(slack)) >= 3)
                wait_for("Alertmanager to pass on each finding", lambda: len(am_findings(hook)) >= 3)
                yield daemon, slack, hook
            finally:
                daemon.shutdown()
    finally:
        kv.stop()
        partial.close()
        slack.close()


def slack_links(slack: FakeSlack, label: str = "Runbook") -> set[str]:
    return {u for r in slack.requests for u in re.findall(rf"<([^|>]+)\|{label}>", json.dumps(r.body))}


def am_alerts(hook: Recorder) -> list[dict[str, Any]]:
    return [a for body in hook.bodies("/hook") for a in body.get("alerts", [])]


def am_findings(hook: Recorder) -> set[str]:
    return {a["labels"].get("finding", "") for a in am_alerts(hook)} - {""}


def page_links(daemon: Daemon, tmp_path: Path) -> set[str]:
    """Runbook links on the status page as Chromium renders it."""
    run = chromium(tmp_path, "--dump-dom", daemon.web.url)
    assert run.returncode == 0, run.stderr[-2000:]
    return set(re.findall(r'<a class="runbook" href="([^"]+)"', run.stdout))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_every_emitted_runbook_link_resolves_to_its_section(
    stack: tuple[Daemon, FakeSlack, Recorder], tmp_path: Path
) -> None:
    daemon, slack, hook = stack
    page = daemon.web.url + "runbook"  # nothing configured: the address the daemon is bound to
    api = requests.get(daemon.web.url + "api/v1/diagnoses", timeout=5).json()["data"]
    emitted = {
        "API": {f["runbook"] for d in api for f in d["findings"]},
        "status page": page_links(daemon, tmp_path),
        "Slack": slack_links(slack),
        "Alertmanager": {a["annotations"]["runbook_url"] for a in am_alerts(hook)},
    }
    for sink, links in emitted.items():
        anchors = {urlsplit(u).fragment for u in links}
        assert {"kv_cache", "target_down", "metrics_missing"} <= anchors, (sink, links)
        assert all(u.startswith(page + "#") for u in links), (sink, links)
    links = set().union(*emitted.values())
    for url in sorted(links):
        r = requests.get(url, timeout=5)  # the fragment stays with the client, as in a browser
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html"), url
        assert f'id="{urlsplit(url).fragment}"' in r.text, url
    for url in sorted(links):
        run = chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", url)
        assert run.returncode == 0, run.stderr[-2000:]
        dom = Ids()
        dom.feed(run.stdout)
        assert urlsplit(url).fragment in dom.ids, url
        console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
        assert not console, (url, console)
        for ref in dom.loads:  # every stylesheet and icon the page asks for is there
            assert requests.get(page.rsplit("/", 1)[0] + "/" + ref, timeout=5).status_code == 200, ref


def test_other_links_in_notifications_resolve(stack: tuple[Daemon, FakeSlack, Recorder]) -> None:
    daemon, slack, hook = stack
    status_links = slack_links(slack, "Status page")
    generators = {a["generatorURL"] for a in am_alerts(hook)}
    assert status_links and generators
    for url in status_links | generators:
        assert url.startswith(daemon.web.url.rstrip("/")), url
        r = requests.get(url, timeout=5)
        assert r.status_code == 200 and "kvdoctor" in r.text, url
