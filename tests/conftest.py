"""Shared fixtures: where the real vLLM recordings live."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support import replays

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "recordings"
FIXTURES = ROOT / "tests" / "fixtures"


def recording_dirs() -> list[Path]:
    """Every directory of labelled recordings: the shared ones (when present) and the committed fixtures."""
    dirs = [d for d in sorted(SHARED.glob("*")) if (d / "labels.json").exists()] if SHARED.exists() else []
    dirs += [d for d in sorted((FIXTURES / "recordings").glob("*")) if (d / "labels.json").exists()]
    return dirs


def labelled_windows() -> list[dict]:
    """Every labelled window, with `path` set to the recording file."""
    out = []
    for d in recording_dirs():
        for entry in json.loads((d / "labels.json").read_text()):
            path = d / entry["file"]
            if path.exists():
                out.append({**entry, "path": path, "dir": d.name})
    return out


@pytest.fixture(scope="session")
def shared_032() -> Path:
    """The shared vLLM 0.32 recordings (skips when ../shared is absent)."""
    d = SHARED / "vllm-0.32-cpu"
    if not d.exists():
        pytest.skip("../shared/recordings/vllm-0.32-cpu not present")
    return d


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The report tests' six-hour synthetic fleet, replayed once (tests/support/fleet.py)."""
    from tests.support.fleet import DIRS, Fleet

    if not DIRS[""].exists():
        pytest.skip("../shared/recordings/vllm-0.32-cpu not present")
    return Fleet(tmp_path_factory.mktemp("fleet"))


def pytest_configure(config: pytest.Config) -> None:
    """Where tests.support.replays keeps replays: pytest's cache, else a directory this run's xdist workers share."""
    worker = getattr(config, "workerinput", {}).get("kvdoctor_replays")
    cache = getattr(config, "cache", None)
    if worker:
        replays.cache_dir = Path(worker)
    elif cache is not None:  # kept between runs: the key holds every input, so nothing stale is reused
        replays.cache_dir = cache.mkdir("kvdoctor-replays")
    elif config.getoption("numprocesses", None):  # -p no:cacheprovider under xdist: for this run only
        replays.cache_dir = Path(tempfile.mkdtemp(prefix="kvdoctor-replays-"))
        config.add_cleanup(lambda: shutil.rmtree(replays.cache_dir or "", ignore_errors=True))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """An xdist worker uses its controller's replay directory (pytest-xdist hook)."""
    if replays.cache_dir is not None:
        node.workerinput["kvdoctor_replays"] = str(replays.cache_dir)


# Fixtures of wider scope that only name a path: their users need not share a worker.
CHEAP_SHARED = {"shared_032"}
_SCOPE_RANK = {"session": 0, "package": 1, "module": 2, "class": 3}


def xdist_group(item: pytest.Item) -> str | None:
    """The worker group of a test under `--dist loadgroup`: the widest expensive fixture it shares, if any.

    A session fixture is built once per worker that needs it, so all users of one conftest's session fixtures
    go to one worker ("tests/integration:session"); a module or class fixture keeps its module together. Other
    tests spread freely.
    """
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    best: tuple[int, str] | None = None
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name)
        if not defs or name in CHEAP_SHARED:
            continue
        fixture = defs[-1]
        if fixture.scope not in _SCOPE_RANK or not fixture.baseid:  # function scope, or pytest's own
            continue
        rank = _SCOPE_RANK[fixture.scope]
        group = f"{fixture.baseid}:session" if fixture.scope == "session" else item.nodeid.split("::", 1)[0]
        if best is None or rank < best[0]:
            best = (rank, group)
    return best[1] if best else None


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the marks into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group tests that share expensive fixtures (see xdist_group); under xdist start the slow ones first."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None and (group := xdist_group(item)):
            item.add_marker(pytest.mark.xdist_group(group))
    if hasattr(config, "workerinput"):  # a worker's order is the queue's: the long tests must not come last
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
