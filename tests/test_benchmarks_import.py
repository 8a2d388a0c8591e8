"""Every benchmark the README and the notes run still starts: its imports resolve against today's package.

bench_fleet_refresh.py imported a constant from the module it lived in before a refactor and stopped starting
with an ImportError, unnoticed for several sessions: no test imported it, and it runs for minutes, so nobody did.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py"))


def test_every_benchmark_module_imports() -> None:
    assert "bench_fleet_refresh" in BENCHMARKS and len(BENCHMARKS) >= 20
    # one process for all of them: each module's top level runs (imports, constants), none runs its main()
    code = (
        "import importlib, sys\n"
        f"sys.path[:0] = [{str(ROOT / 'benchmarks')!r}, {str(ROOT)!r}]\n"
        "failed = []\n"
        f"for name in {BENCHMARKS!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed.append(f'{name}: {type(exc).__name__}: {exc}')\n"
        "print('\\n'.join(failed))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", out.stdout
