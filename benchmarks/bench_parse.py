"""Parse speed on real vLLM expositions: kvdoctor's parser against prometheus-client's, as a ratio in one run.

usage: python benchmarks/bench_parse.py [RECORDING ...]   (default: the shipped demo recordings)
       python benchmarks/bench_parse.py --against OLD_PARSE_PY   (this parser against an older parse.py, one run)
Reports, per recording, the median CPU time per exposition of prometheus_client.parser.text_string_to_metric_families
(materialised, as a consumer would) and of kvdoctor.ingest.parse, cold (fresh parser each time) and warm (one parser per
target, as the daemon runs it), and the speed-up ratios. Absolute times depend on the machine; the ratios do not much.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

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


def _module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("old_parse", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["old_parse"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def against(old_path: str, rounds: int = 15) -> None:
    """This parser's CPU time over an older parse.py's on the same pages, interleaved; the best of rounds each."""
    old = _module(old_path)
    paths = sorted((ROOT / "kvdoctor" / "demo").glob("*.jsonl.gz"))
    texts = [f.text for p in paths for f in load_frames(p) if f.text][::5][:60]
    for label, make in (("cold", lambda m: m.parse), ("warm", lambda m: m.Parser().parse)):
        best = {"old": float("inf"), "new": float("inf")}
        for _ in range(rounds):  # interleaved, and the minimum: the machine's other load only adds time
            for kind, fn in (("old", make(old)), ("new", make(sys.modules["kvdoctor.ingest.parse"]))):
                start = time.process_time()
                for t in texts:
                    fn(t)
                best[kind] = min(best[kind], (time.process_time() - start) / len(texts))
        print(
            f"{label}: old {best['old'] * 1e3:.3f} ms, new {best['new'] * 1e3:.3f} ms per page, "
            f"new/old {best['new'] / best['old']:.3f}"
        )


def main() -> None:
    if sys.argv[1:2] == ["--against"]:
        against(sys.argv[2])
        return
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
