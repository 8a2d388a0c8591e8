"""The committed dashboards type-check against Grafana's own published schema (@grafana/schema, pinned in npm)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.dashboards import dashboard_files, load

CHECK = Path(__file__).resolve().parent / "grafana_schema"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(
    NODE is None, reason="node is not installed (scripts/test.sh installs nodejs npm)"
)


@pytest.fixture(scope="module")
def validator() -> Path:
    """validate.mjs with its pinned node_modules (installed with `npm ci` when missing)."""
    if not (CHECK / "node_modules" / "@grafana" / "schema").is_dir():
        npm = shutil.which("npm")
        assert npm, "node is installed but npm is not: cannot install tests/grafana_schema/package-lock.json"
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=CHECK, capture_output=True, text=True
        )
        assert done.returncode == 0, f"npm ci in {CHECK} failed:\n{done.stderr}"
    return CHECK / "validate.mjs"


def validate(validator: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NODE or "node", str(validator), *map(str, files)], capture_output=True, text=True, timeout=120
    )


def pinned_version() -> str:
    return str(json.loads((CHECK / "package.json").read_text())["devDependencies"]["@grafana/schema"])


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
def test_dashboards_match_grafanas_schema(validator: Path) -> None:
    files = dashboard_files()
    assert len(files) >= 2
    done = validate(validator, *files)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(files)} dashboards match @grafana/schema {pinned_version()}" in done.stdout


def test_pinned_schema_is_the_grafana_the_stack_runs() -> None:
    compose = (Path(__file__).resolve().parents[1] / "docker-compose.yml").read_text()
    assert f"grafana/grafana:${{GRAFANA_TAG:-{pinned_version()}}}" in compose


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
def test_schema_violations_are_reported_with_file_and_panel(validator: Path, tmp_path: Path) -> None:
    d = load(dashboard_files()[0])
    ts = next(p for p in d["panels"] if p["type"] == "timeseries")
    ts["options"]["legend"]["placment"] = "bottom"  # misspelt key
    stat = next(p for p in d["panels"] if p["type"] == "stat")
    stat["options"]["colorMode"] = "rainbow"  # not one of the enum's values
    d["panels"][0]["gridPos"]["w"] = "12"  # a string where a number belongs
    d["refresh_rate"] = "30s"  # no such dashboard field
    bad = tmp_path / "broken.json"
    bad.write_text(json.dumps(d))
    done = validate(validator, bad)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert all(line.startswith(f"{bad}: ") for line in lines), lines
    assert any(f'panel "{ts["title"]}"' in line and "placment" in line for line in lines), lines
    assert any(f'panel "{stat["title"]}"' in line and "rainbow" in line for line in lines), lines
    assert any(f'panel "{d["panels"][0]["title"]}"' in line and '"w": "12"' in line for line in lines), lines
    assert any("the dashboard (outside its panels)" in line and "refresh_rate" in line for line in lines), (
        lines
    )
