"""Build the demo recordings shipped in the package (kvdoctor/demo/) from real vLLM 0.32 recordings.

usage: python tools/make_demo_data.py [SHARED_RECORDINGS_DIR]
Keeps only vLLM's own families (drops python_*, process_*, http_* and *_created lines), byte for byte otherwise,
so the demo replays what a real engine exposed, in a package a few hundred KB smaller.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("healthy", "kv_bound", "batch_cap", "compute_bound")


def keep(line: str) -> bool:
    """vLLM sample, HELP and TYPE lines, without created-timestamps."""
    name = line[7:] if line.startswith(("# HELP ", "# TYPE ")) else line
    return name.startswith("vllm:") and "_created" not in name.split("{", 1)[0].split(" ", 1)[0]


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "recordings" / "vllm-0.32-cpu"
    out_dir = ROOT / "kvdoctor" / "demo"
    out_dir.mkdir(exist_ok=True)
    for name in SOURCES:
        out = []
        with gzip.open(src / f"{name}.jsonl.gz", "rt", encoding="utf-8") as fh:
            for line in fh:
                rec = json.loads(line)
                if "text" in rec:
                    rec = {
                        "t": rec["t"],
                        "text": "\n".join(x for x in rec["text"].split("\n") if keep(x)) + "\n",
                    }
                out.append(json.dumps(rec))
        with (
            open(out_dir / f"{name}.jsonl.gz", "wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz,
        ):
            gz.write(("\n".join(out) + "\n").encode())
        print(name, (out_dir / f"{name}.jsonl.gz").stat().st_size)


if __name__ == "__main__":
    main()
