"""Each recording's measured class, as `whatif` replays it, at two evaluation cadences: what changes, and the cost.

    python tools/compare_classes.py [--cadences 5,15] [--only SUBSTRING] [--out RESULTS.jsonl]

For every recording with a default window (tools/sweep_recordings.py's list), the recording is replayed through
the real pipeline with the relief check on (books only, from the window's start, as `whatif` does) at each cadence,
and the verdicts inside the window are counted. One JSON line per recording: the class (the most common verdict)
and the counts at each cadence, and the CPU seconds each replay took. A change to evaluation, relief or the rule
pack that should not move a class is checked by running this before and after it and diffing the classes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout, not the editable install's
sys.path.insert(0, str(ROOT / "tools"))

import sweep_recordings  # noqa: E402

from kvdoctor.cli.whatif import source_window, window_verdicts  # noqa: E402
from kvdoctor.errors import InputError  # noqa: E402
from kvdoctor.whatif.sources import recording_snaps  # noqa: E402


def compare(path: Path, cadences: list[float]) -> dict[str, Any] | None:
    """One recording at each cadence; None when it has no window a what-if learns from (an idle recording)."""
    snaps = recording_snaps(path)
    try:
        lo, hi = source_window(argparse.Namespace(window=None, source=str(path), prometheus_url=None), snaps)
    except InputError:
        return None
    out: dict[str, Any] = {"recording": str(path)}
    for every in cadences:
        t = time.process_time()
        seen = window_verdicts(path, lo, hi, every)
        out[f"{every:g}s"] = {
            "class": seen.most_common(1)[0][0] if seen else None,
            "verdicts": dict(seen),
            "cpu_s": round(time.process_time() - t, 2),
        }
    classes = {out[f"{every:g}s"]["class"] for every in cadences}
    out["same"] = len(classes) == 1
    return out


def main(argv: list[str] | None = None) -> int:
    """Compare; exit 1 when a class differs between the cadences."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cadences", default="5,15", help="comma-separated evaluation intervals in seconds")
    ap.add_argument("--only", action="append", default=[], help="recordings whose path holds this")
    ap.add_argument("--out", help="also write the JSON lines here")
    args = ap.parse_args(argv)
    cadences = [float(c) for c in args.cadences.split(",")]
    recs = [r for r in sweep_recordings.recordings() if not args.only or any(s in str(r) for s in args.only)]
    rows = [row for r in recs if (row := compare(r, cadences)) is not None]
    lines = [json.dumps(row) for row in rows]
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("".join(f"{line}\n" for line in lines))
    differ = [row["recording"] for row in rows if not row["same"]]
    cost = {f"{c:g}s": round(sum(row[f"{c:g}s"]["cpu_s"] for row in rows), 1) for c in cadences}
    print(f"\n{len(rows)} recordings, {len(differ)} with another class; CPU seconds {cost}", file=sys.stderr)
    for d in differ:
        print(f"  differs: {d}", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
