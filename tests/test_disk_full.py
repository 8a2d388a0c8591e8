"""A full or read-only disk under the state directory degrades kvdoctor, never stops it: a real small tmpfs.

Notifications go on from memory (Slack stand-in, a real Alertmanager), writes are retried and counted, /-/ready
says so after a bound, no temporary file is left, and once the disk takes writes again the outage's owed
transitions are in the file and delivered after a restart.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from kvdoctor.config import Config
from kvdoctor.daemon.runner import Daemon
from kvdoctor.notify import Notifier, parse_notify_config
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.web.app import App
from tests.notify_support.alertmanager import running_alertmanager
from tests.notify_support.diagnoses import kv_incident
from tests.notify_support.fake_slack import FakeSlack
from tests.support.clock import ManualClock
from tests.support.daemon import Daemons

TOKEN = "xoxb-" + "1234567890-1234567890123-abcdefghijklmnopqrstuvwx"


def _mount(path: Path, opts: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    run = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True)
    return run.returncode == 0


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 384 KiB tmpfs: sqlite, the state file and the filler that fills it live on a real filesystem."""
    mnt = tmp_path / "state"
    if os.geteuid() != 0 or not _mount(mnt, "size=384k,mode=0755"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory: Path) -> Path:
    """Write a filler file until the filesystem refuses more (ENOSPC); returns it (delete it to free the disk)."""
    filler = directory / "filler"
    for name, size in ((filler, 4096), (directory / "crumbs", 1)):  # then the last partial block too
        with contextlib.suppress(OSError), name.open("wb", buffering=0) as fh:
            while True:
                fh.write(b"\0" * size)
    return filler


def _free(directory: Path) -> None:
    for name in ("filler", "crumbs"):
        (directory / name).unlink(missing_ok=True)


class Tick:
    """A monotonic clock the test moves, so backoff delays pass without sleeping."""

    def __init__(self) -> None:
        self.t = time.monotonic()  # from now: a backoff set before the test swapped clocks counts on it too

    def __call__(self) -> float:
        return self.t


@pytest.mark.integration
@pytest.mark.parametrize("slack_up", [True, False], ids=["slack-up", "slack-down-too"])
def test_notifications_go_on_while_the_disk_is_full_and_catch_up_when_it_is_free(
    slack_up: bool, tmpfs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    slack = FakeSlack()
    with running_alertmanager(tmp_path) as (am_url, rx):
        section = {
            "for": "1m",
            "resolve_after": "1m",
            "retry": {"initial": 0.05, "max": 0.2},
            "slack": {"timeout": 1, "retries": 0},
            "alertmanager": {"url": am_url},
        }
        env = {
            "KVDOCTOR_SLACK_TOKEN": TOKEN,
            "KVDOCTOR_SLACK_CHANNEL": "#vllm",
            "KVDOCTOR_SLACK_BASE_URL": slack.api_url,
        }
        cfg, errors = parse_notify_config(section, env)
        assert errors == []
        seq = kv_incident()
        shift = time.time() - seq[19].t  # real time: Alertmanager ignores alerts that ended in the past
        for d in seq:
            for f in d.findings:
                f.since = (f.since or d.t) + shift
        n = Notifier(cfg, tmpfs, slack_retry_backoff=0.01)
        tick = Tick()
        n.outbox.monotonic = tick
        for d in seq[:8]:  # healthy: the outbox file exists and holds the lifecycle state
            n.observe([d], d.t + shift)
        caplog.set_level(logging.ERROR)
        filler = fill(tmpfs)
        if not slack_up:
            slack.set_mode("500")  # Slack is down too: what is owed lives only in memory now
        for d in seq[8:20]:  # the KV limit fires and holds
            n.observe([d], d.t + shift)  # never raises
            tick.t += 0.5
        if slack_up:  # delivered from memory: the root posted, its thread remembered in memory
            assert n.flush(10) and len(slack.delivered("/chat.postMessage")) >= 1
        # Alertmanager needs no disk: it gets the outage's alert while the disk is full
        firing = rx.wait(
            lambda bodies: next((b for b in bodies if b.get("status") == "firing"), None), timeout=20
        )
        assert firing["alerts"][0]["labels"]["alertname"] == "VLLMKVCacheBound"
        for d in seq[20:]:  # ... and resolves
            n.observe([d], d.t + shift)
            tick.t += 0.5
        if slack_up:
            assert (
                n.flush(10) and len(slack.delivered("/chat.update")) == 1
            )  # resolved while the disk is full
        stats = n.outbox.stats()
        assert stats.write_failures_total >= 1, stats
        # Slack up: delivered from memory, nothing owed; Slack down: owed, and only in memory
        assert stats.unsaved == 0 if slack_up else stats.unsaved >= 2, stats
        assert "database or disk is full" in stats.write_error
        assert (
            sum("cannot write notification outbox" in r.getMessage() for r in caplog.records) == 1
        )  # said once
        # the disk is freed: the next retry writes everything owed, then the daemon stops before Slack is back
        filler.unlink()
        _free(tmpfs)
        tick.t += 120
        assert n.outbox.retry_writes() is True
        after = n.outbox.stats()
        assert after.failing_since is None and after.unsaved == 0
        assert after.pending == 0 if slack_up else after.pending >= 2  # owed ones now in the file
        n.close()
        assert not [p.name for p in tmpfs.iterdir() if p.suffix == ".tmp"]
        # restart with Slack up: the outage's transitions are delivered from the file, once (and never twice)
        slack.set_mode("ok")
        n2 = Notifier(cfg, tmpfs, slack_retry_backoff=0.01)
        assert n2.flush(15)
        n2.close()
    slack.close()
    posts = slack.delivered("/chat.postMessage")
    roots = [r for r in posts if "thread_ts" not in r.body]
    assert len(roots) == 1 and "KV cache full" in roots[0].body["text"]
    assert len(slack.delivered("/chat.update")) == 1  # the resolution


def _daemon(daemons: Daemons, state: Path, clock: ManualClock) -> Daemon:
    d = daemons(
        Config(targets=[], state_file=str(state / "state.json"), interval_s=5.0),
        load_files(default_rule_files()),
        clock=clock,
    )
    d.storage_grace_s = 0.0  # report an outage at once (the default waits 5 minutes)
    return d


def _ready(d: Daemon) -> tuple[int, str]:
    r = App(d.state, d.registry).handle("GET", "/-/ready", {})
    return r.status, r.body.decode()


def test_start_up_on_a_full_state_directory_names_it_and_runs_without_persistence(
    tmpfs: Path, daemons: Daemons, caplog: pytest.LogCaptureFixture
) -> None:
    filler = fill(tmpfs)
    caplog.set_level(logging.WARNING)
    clock = ManualClock(1_796_000_000.0)
    d = _daemon(daemons, tmpfs, clock)
    (warning,) = [r.getMessage() for r in caplog.records if "not writable" in r.getMessage()]
    assert str(tmpfs) in warning and "No space left on device" in warning and "without persistence" in warning
    for _ in range(3):
        d.cycle()  # no exception: the cycle goes on
    assert not (tmpfs / "state.json").exists()
    assert not [p.name for p in tmpfs.iterdir() if p.suffix == ".tmp"]  # no zero-byte leftovers
    failures = 'kvdoctor_state_write_failures_total{file="state"}'
    assert f"{failures} 1.0" in generate_latest(d.registry).decode()  # retried with backoff, not per cycle
    clock.advance(1.5)  # past the first backoff (1 s) on the daemon's clock, whatever the wall clock did
    d.cycle()
    assert f"{failures} 2.0" in generate_latest(d.registry).decode()
    status, body = _ready(d)
    assert status == 503 and "state file" in body and str(tmpfs / "state.json") in body
    shown = json.loads(App(d.state, d.registry).handle("GET", "/api/v1/status", {}).body)["data"]["storage"]
    assert shown["state"]["failing_since"] is not None and "No space left" in shown["state"]["error"]
    assert body.strip() == f"kvdoctor is not ready: {shown['problem']}."
    # the disk is freed: the next due retry writes the state and the daemon is ready again
    filler.unlink()
    _free(tmpfs)
    d.writer._retry_at = 0.0  # type: ignore[attr-defined]  # the backoff has passed
    d.cycle()
    assert (tmpfs / "state.json").exists() and _ready(d)[0] == 200
    assert "written again" in caplog.text


def test_a_read_only_state_directory_is_named_and_kvdoctor_runs_on(
    tmpfs: Path, daemons: Daemons, caplog: pytest.LogCaptureFixture
) -> None:
    assert subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)]).returncode == 0
    caplog.set_level(logging.WARNING)
    clock = ManualClock(1_796_000_000.0)
    d = _daemon(daemons, tmpfs, clock)
    assert any(
        str(tmpfs) in r.getMessage() and "Read-only file system" in r.getMessage() for r in caplog.records
    )
    d.cycle()
    assert d.state.snapshot().storage["state"].write_failures_total == 1
    assert "Read-only file system" in d.state.snapshot().storage["state"].error


def test_notifier_start_up_on_a_full_disk_names_the_outbox_and_delivers_from_memory(
    tmpfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    slack = FakeSlack()
    try:
        env = {
            "KVDOCTOR_SLACK_TOKEN": TOKEN,
            "KVDOCTOR_SLACK_CHANNEL": "#vllm",
            "KVDOCTOR_SLACK_BASE_URL": slack.api_url,
        }
        cfg, errors = parse_notify_config({"for": "1m", "resolve_after": "1m", "slack": {"retries": 0}}, env)
        assert errors == []
        filler = fill(tmpfs)
        caplog.set_level(logging.WARNING)
        n = Notifier(cfg, tmpfs, slack_retry_backoff=0.01)  # no traceback
        tick = Tick()
        n.outbox.monotonic = tick
        (said,) = [r.getMessage() for r in caplog.records if "cannot be opened" in r.getMessage()]
        assert str(tmpfs / "notify.sqlite") in said and "from memory" in said
        for d in kv_incident():
            n.observe([d], d.t)
            tick.t += 0.5
        assert n.flush(10)
        assert len(slack.delivered("/chat.update")) == 1  # the whole incident, from memory
        filler.unlink()
        _free(tmpfs)
        tick.t += 120
        assert n.outbox.retry_writes() is True, n.outbox.stats()
        assert (tmpfs / "notify.sqlite").stat().st_size > 0
        n.close()
        n2 = Notifier(cfg, tmpfs)  # the lifecycle state of the outage was written: nothing is re-announced
        assert n2.lifecycle.groups == {} and n2.outbox.stats().pending == 0
        n2.close()
    finally:
        slack.close()
