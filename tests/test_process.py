"""The daemon and the demo as processes: signals, reload, drain, and the README's main command."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from kvdoctor.replayserver import Playlist, ReplayServer
from kvdoctor.rules.loader import default_rule_files
from tests.support.wait import until

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "kvdoctor" / "demo"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, timeout: float = 20.0) -> requests.Response:
    def ok() -> requests.Response | None:
        r = requests.get(url, timeout=1)
        return r if r.status_code == 200 else None

    return until(
        ok, timeout=timeout, step=0.2, what=f"{url} to answer 200", ignore=(requests.RequestException,)
    )


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    assert m, name
    return float(m.group(1))


def test_sighup_reload_keeps_last_good_and_sigterm_drains(tmp_path):
    server = ReplayServer(Playlist([DEMO / "batch_cap.jsonl.gz"], start_offset_s=40, loop=True)).start()
    rules = tmp_path / "rules.yml"
    rules.write_text(default_rule_files()[0].read_text())
    port = free_port()
    cfg = tmp_path / "kvdoctor.yml"
    state = tmp_path / "state.json"
    cfg.write_text(
        f"interval: 1s\nlisten: 127.0.0.1:{port}\nstate_file: {state}\nrules: ['{rules}']\n"
        f"log: {{format: json}}\ntargets: ['{server.url}']\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvdoctor", "serve", "--config", str(cfg)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(f"{base}/-/ready")
        assert (
            metric(requests.get(f"{base}/metrics", timeout=5).text, "kvdoctor_config_last_reload_successful")
            == 1
        )
        rules.write_text("groups: [{name: g, rules: [{record: x, expr: 'sum(rate(y[5m])'}]}]\n")
        os.kill(proc.pid, signal.SIGHUP)
        until(
            lambda: (
                metric(
                    requests.get(f"{base}/metrics", timeout=5).text, "kvdoctor_config_last_reload_successful"
                )
                == 0
            ),
            timeout=10,
            step=0.2,
            what="SIGHUP to reload (and fail)",
        )
        assert requests.get(f"{base}/-/healthy", timeout=5).status_code == 200  # still serving the old pack
        rules.write_text(default_rule_files()[0].read_text())
        assert requests.post(f"{base}/-/reload", timeout=10).status_code == 200
        assert (
            metric(requests.get(f"{base}/metrics", timeout=5).text, "kvdoctor_config_last_reload_successful")
            == 1
        )
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0
        assert state.exists()
        assert '"msg": "reload failed, keeping the running config' in err  # JSON logs
        assert "unclosed left parenthesis" in err
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()


@pytest.mark.slow  # the real demo for 20 s
def test_demo_prints_changes_and_the_status_page():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvdoctor",
            "demo",
            "--duration",
            "20",
            "--interval",
            "1",
            "--speed",
            "4",
            "--listen",
            "127.0.0.1:0",  # a port the system picks: one picked here could be taken by another test meanwhile
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    # the demo's own settings warn about nothing the user can change
    assert "scrape timeout" not in proc.stderr
    out = proc.stdout
    bound = re.search(r"status page: http://127\.0\.0\.1:(\d+)/", out)
    assert bound and int(bound.group(1)) > 0, out
    assert re.search(r"vllm-c · tiny  compute \(was", out)
    assert re.search(r"vllm-b · tiny  batch_cap \(was", out)
    assert "raise `--max-num-seqs` from 4" in out


def test_demo_on_a_taken_address_says_so_naming_the_flag():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "kvdoctor", "demo", "--duration", "1", "--listen", f"127.0.0.1:{port}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2
    assert f"kvdoctor demo: --listen 127.0.0.1:{port}: " in proc.stderr and "in use" in proc.stderr
    assert "status page" not in proc.stdout  # not moved to another port behind the user's back
