"""Compact a raw recording: keep the scrapes in a time window and gzip them.

usage: tools/record/trim.py RAW.jsonl[.gz] OUT.jsonl.gz --start T0 --end T1 [--margin 20]
Keeps lines with T0 - margin <= t <= T1 + margin, byte for byte (scrape lines {"t", "text"} and failed-scrape
lines {"t", "error"} alike), and writes them gzipped (level 9, no name/mtime in the header, so reruns are identical).
"""

import argparse
import gzip
import json
import os


def read_lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [line if line.endswith("\n") else line + "\n" for line in f if line.strip()]


def write_gzip(path, lines):
    """Lines gzipped at level 9 with no name or mtime in the header, so reruns are identical."""
    with (
        open(path, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as gz,
    ):
        gz.write("".join(lines).encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw")
    ap.add_argument("out")
    ap.add_argument("--start", type=float, required=True, help="first labelled second (unix)")
    ap.add_argument("--end", type=float, required=True, help="last labelled second (unix)")
    ap.add_argument("--margin", type=float, default=20.0, help="seconds kept either side")
    a = ap.parse_args()
    recs = [(ln, json.loads(ln)) for ln in read_lines(a.raw)]
    keep = [(ln, r) for ln, r in recs if a.start - a.margin <= r["t"] <= a.end + a.margin]
    write_gzip(a.out, [ln for ln, _ in keep])
    errors = sum("error" in r for _, r in keep)
    print(f"{a.out}: {len(keep)} lines ({errors} failed scrapes), {os.path.getsize(a.out) / 1000:.0f} kB")


if __name__ == "__main__":
    main()
