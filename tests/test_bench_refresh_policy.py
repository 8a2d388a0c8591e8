"""benchmarks/bench_refresh_policy.py still counts: it steps the daemon's advisor through `Advisor.work_once` on its own
clock, so a change to the advisor that it no longer follows shows here, not in the next session's numbers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_the_refresh_benchmark_runs_a_small_fleet_and_its_counts_agree():
    run = subprocess.run(
        [sys.executable, "benchmarks/bench_refresh_policy.py", "--targets", "8", "--minutes", "4"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"kvdoctor from {ROOT / 'kvdoctor'}" in run.stdout  # this checkout's advisor, not an installed one
    per_minute = re.search(r"simulations run, per minute: \[([\d, ]+)\]", run.stdout)
    total = re.search(r"(\d+) simulations in 4 minutes at 8 targets", run.stdout)
    computed = re.search(r"'computed': (\d+)", run.stdout)
    assert per_minute and total and computed, run.stdout
    ran = [int(n) for n in per_minute.group(1).split(",")]
    assert len(ran) == 4 and sum(ran) == int(total.group(1)) > 0  # the stepped worker served the queue
    assert int(computed.group(1)) == int(total.group(1))  # every simulation the advisor counts is one it ran
