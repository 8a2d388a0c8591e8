"""Processes and HTTP for the fleet benchmarks: a free port, a process tree's CPU seconds, a GET, a family's sum, a wait."""

from __future__ import annotations

import contextlib
import os
import socket
import time
import urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port free now on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        return fh.read().rsplit(")", 1)[1].split()


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process and its children (its simulation process) have used."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):  # a process that just ended
                kids.setdefault(int(_stat(int(entry))[1]), []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            f = _stat(p)
        except OSError:
            continue
        # utime, stime, cutime, cstime: fields 14-17 of proc(5); children that ended were waited for
        total += sum(int(x) for x in f[11:15]) / TICK
        todo.extend(kids.get(p, []))
    return total


def get(url: str, timeout: float = 60.0) -> str:
    """The body of a GET."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode("utf-8"))


def metric_sum(text: str, name: str, where: str = "") -> float:
    """The sum of a family's samples in an exposition (those whose labels contain `where`)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and where in line and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_for(what: str, check: object, deadline_s: float) -> None:
    """Poll check() until it is true, or fail naming what did not happen."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except OSError:
            pass
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.5)
