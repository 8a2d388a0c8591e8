"""Turn repeated runs of one configuration into vllm-0.32-cpu-repeats/: what two recordings of the same thing differ by.

usage: tools/record/repeat_fixtures.py RAW_DIR OUT_DIR --group NAME:RUN,RUN[,RUN…] [--also NAME:PATH] [--every 2]

Each run was recorded by record_plan_check2.sh with the same flags, rate and seed (the same arrivals), so whatever
differs between them is the machine: the what-if can be no closer to a measurement than that, and a "direction" of a
change smaller than it is noise. repeats.json lists, per group, its runs (recording, client file, the steady window
and what vLLM's metrics measured over it, as plancheck.json has them); --also adds a run already committed elsewhere
(a path relative to OUT_DIR). `benchmarks/bench_whatif.py` prints the groups' spread beside its errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from plancheck_fixtures import run_entry
from ramp_fixtures import SERVE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--group", action="append", required=True, help="NAME:RUN,RUN… (raw run names)")
    ap.add_argument(
        "--also", action="append", default=[], help="NAME:PATH a committed recording for group NAME"
    )
    ap.add_argument("--cap", type=int, required=True, help="the runs' --max-num-seqs")
    ap.add_argument("--rate", type=float, required=True, help="the runs' open-loop req/s")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--host", default="")
    ap.add_argument("--every", type=float, default=2.0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    serve = SERVE.replace("--dtype float32", f"--dtype {a.dtype}")
    also: dict[str, list[str]] = {}
    for spec in a.also:
        name, path = spec.split(":", 1)
        also.setdefault(name, []).append(path)
    groups = []
    for spec in a.group:
        name, runs = spec.split(":", 1)
        entries = [
            run_entry(a.raw, a.out, r, "repeat", a.cap, 1, a.rate, a.every, serve) for r in runs.split(",")
        ]
        for path in also.get(name, []):
            doc = json.loads((a.out / Path(path).parent / "plancheck.json").read_text())
            entry = next(r for r in doc["runs"] if r["recording"] == Path(path).name)
            entries.append({**entry, "recording": path, "client": str(Path(path).parent / entry["client"])})
        groups.append({"name": name, "runs": entries})
    doc = {"about": __doc__.split("\n\n", 2)[1].strip(), "host": a.host, "groups": groups}
    (a.out / "repeats.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
