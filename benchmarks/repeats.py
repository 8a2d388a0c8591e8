"""What two recordings of one configuration differ by: the floor under every what-if error and direction.

Reads repeats.json (tools/record/repeat_fixtures.py): groups of runs with the same flags, rate and seed. For each
pair of runs in a group, the relative difference of each headline quantity over their steady windows
(|a - b| / mean), as vLLM's own metrics read them; printed by bench_whatif.py beside "bucket ±".
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path

from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.window import in_window, measure

REPEATS = Path(__file__).resolve().parents[1] / "tests/fixtures/recordings/vllm-0.32-cpu-repeats"


def differences(folder: Path, keys: tuple[str, ...]) -> dict[str, list[float]]:
    """Per quantity, the relative difference of every pair of runs of a group, over all groups."""
    doc = json.loads((folder / "repeats.json").read_text())
    out: dict[str, list[float]] = {k: [] for k in keys}
    for group in doc["groups"]:
        got = [
            measure(in_window(recording_snaps(folder / r["recording"]), *r["step"]["window_unix"])).to_dict()
            for r in group["runs"]
        ]
        for a, b in itertools.combinations(got, 2):
            for k in keys:
                x, y = a.get(k), b.get(k)
                if isinstance(x, float) and isinstance(y, float) and math.isfinite(x + y) and x + y > 0:
                    out[k].append(abs(x - y) / ((x + y) / 2))
    return out


def report(keys: tuple[str, ...], folder: Path = REPEATS) -> None:
    """One line: the median and largest difference per quantity (nothing when no repeats are present)."""
    if not (folder / "repeats.json").is_file():
        return
    diffs = differences(folder, keys)
    n = len(next(iter(diffs.values()), []))
    print(
        "  repeats   ±  "
        + "".join(
            f"{k} {statistics.median(v):.0%} (≤{max(v):.0%})  " if v else f"{k} n/a  "
            for k, v in diffs.items()
        )
        + f"(two recordings of one configuration, same arrivals: {n} pairs, {folder.name})"
    )
