"""Shared fixtures: where the real vLLM recordings live."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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
