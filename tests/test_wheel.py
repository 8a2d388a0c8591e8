"""The built wheel, installed into a fresh venv outside the checkout, runs the demo and serves its own files."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str | Path, cwd: Path, timeout: float = 600) -> str:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of a fresh venv holding the wheel built from the tracked files of this checkout (deps from PyPI)."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    # Build from a copy of what git tracks: nothing untracked sneaks in, and the checkout gets no build/ dir.
    files = _run("git", "ls-files", "-z", cwd=ROOT).split("\0")
    for name in filter(None, files):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        source = ROOT / name
        if source.is_symlink():
            (src / name).symlink_to(source.readlink())
        elif source.is_file():
            shutil.copy2(source, src / name)
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", work / "dist", src, cwd=work)
    (wheel,) = (work / "dist").glob("kvdoctor-*.whl")
    _run(sys.executable, "-m", "venv", work / "venv", cwd=work)
    _run(work / "venv" / "bin" / "pip", "install", "-q", wheel, cwd=work)
    return work / "venv" / "bin"


@pytest.mark.slow
def test_the_installed_wheel_runs_from_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    where = _run(installed / "python", "-c", "import kvdoctor, sys; print(kvdoctor.__file__)", cwd=tmp_path)
    package = Path(where.strip()).parent
    assert package.is_relative_to(installed.parent) and not package.is_relative_to(ROOT)
    assert _run(installed / "kvdoctor", "--version", cwd=tmp_path).startswith("kvdoctor ")
    exported = _run(installed / "kvdoctor", "rules", "export", cwd=tmp_path)
    assert "alert: VLLMKVCacheBound" in exported and "record: kvdoctor:kv_usage:max1m" in exported

    demo = subprocess.Popen(
        [installed / "kvdoctor", "demo", "--listen", "127.0.0.1:0", "--interval", "1s", "--duration", "120s"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert demo.stdout is not None
        url = ""
        for line in demo.stdout:  # the demo prints its status page's address once it listens
            if m := re.match(r"status page: (http://\S+)", line):
                url = m.group(1)
                break
        assert url, demo.stderr.read() if demo.stderr else "no status page line"
        for name in ("index.html", "app.js", "style.css"):
            served = requests.get(url + ("" if name == "index.html" else f"static/{name}"), timeout=10)
            assert (
                served.status_code == 200
                and served.content == (package / "web" / "static" / name).read_bytes()
            )
        listed = requests.get(url + "api/v1/targets", timeout=10).json()["data"]
        assert {t["name"] for t in listed} >= {
            "vllm-a",
            "vllm-b",
            "vllm-c",
        }  # the replayed servers it watches
        assert "process_resident_memory_bytes" in requests.get(url + "metrics", timeout=10).text
    finally:
        demo.send_signal(signal.SIGTERM)
        demo.wait(30)
    assert demo.returncode == 0
