"""Parse speed on real vLLM expositions: kvdoctor's parser against prometheus-client's, as a ratio in one run.

usage: python benchmarks/bench_parse.py [RECORDING ...]   (default: the shipped demo recordings)
Reports, per recording, the median CPU time per exposition of prometheus_client.parser.text_string_to_metric_families
(materialised, as a consumer would) and of kvdoctor.ingest.parse, cold (fresh parser each time) and warm (one parser per
target, as the daemon runs it), and the speed-up ratios. Absolute times depend on the machine; the ratios do not much.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kvdoctor.ingest.parse import Parser, parse
from kvdoctor.ingest.recording import load_frames

ROOT = Path(__file__).resolve().parents[1]


def _reference(text: str) -> int:
    return sum(len(f.samples) for f in text_string_to_metric_families(text))


def _median_cpu(fn, texts: list[str], rounds: int = 5) -> float:  # type: ignore[no-untyped-def]
    per = []
    for _ in range(rounds):
        start = time.process_time()
        for t in texts:
            fn(t)
        per.append((time.process_time() - start) / len(texts))
    return statistics.median(per)


def bench(path: Path) -> tuple[float, float, float]:
    """Seconds per exposition: reference, cold, warm."""
    texts = [f.text for f in load_frames(path) if f.text][::5][:30]
    warm = Parser()
    return _median_cpu(_reference, texts), _median_cpu(parse, texts), _median_cpu(warm.parse, texts)


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted((ROOT / "kvdoctor" / "demo").glob("*.jsonl.gz"))
    shared = ROOT.parent / "shared" / "recordings" / "vllm-0.32-cpu"
    if not sys.argv[1:] and shared.exists():
        paths = sorted(shared.glob("*.jsonl.gz"))
    print(
        f"{'recording':28s} {'bytes':>8s} {'prom-client':>12s} {'kvdoctor':>10s} {'warm':>10s} {'ratio':>7s} {'warm':>7s}"
    )
    ratios = []
    for p in paths:
        size = len(next(f.text for f in load_frames(p) if f.text) or "")
        ref, cold, warm = bench(p)
        ratios.append(ref / cold)
        print(
            f"{p.name:28s} {size:8d} {ref * 1e3:10.2f}ms {cold * 1e3:8.2f}ms {warm * 1e3:8.2f}ms {ref / cold:6.1f}x {ref / warm:6.1f}x"
        )
    print(f"\nmedian speed-up, cold parser: {statistics.median(ratios):.1f}x (target: >= 3x)")


if __name__ == "__main__":
    main()
