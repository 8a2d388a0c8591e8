"""A real Alertmanager (Debian's prometheus-alertmanager, clustering off) whose webhook is a local Recorder."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from tests.notify_support.http_recorder import Recorder
from tests.support.wait import until

AM = shutil.which("prometheus-alertmanager")


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_alertmanager(workdir: Path, config: Path | None = None) -> Iterator[tuple[str, Recorder]]:
    """(Alertmanager URL, receiver); group_wait 1s, send_resolved on, unless `config` is given (then the
    receiver hears nothing); skips when the binary is missing."""
    if AM is None:
        pytest.skip("prometheus-alertmanager not installed")
    rx, port = Recorder(), free_port()
    if config is None:
        config = workdir / "am.yml"
        config.write_text(
            "route: {receiver: hook, group_by: [instance], group_wait: 1s, group_interval: 1s, "
            "repeat_interval: 1h}\n"
            f"receivers: [{{name: hook, webhook_configs: [{{url: '{rx.url}/hook', send_resolved: true}}]}}]\n"
        )
    args = [
        AM,
        f"--config.file={config}",
        f"--storage.path={workdir / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        until(
            lambda: requests.get(f"{url}/-/ready", timeout=0.5).ok,
            timeout=15,
            step=0.1,
            what=f"alertmanager ready at {url}",
            ignore=(requests.ConnectionError,),
        )
        yield url, rx
    finally:
        proc.terminate()
        proc.wait(10)
        rx.close()
