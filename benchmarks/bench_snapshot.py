"""CPU per what-if snapshot on real vLLM recordings (the daemon builds one per target per scrape, Advisor.observe).

usage: python benchmarks/bench_snapshot.py [RECORDING ...]
       python benchmarks/bench_snapshot.py --against OLD_WINDOW_PY [RECORDING ...]
Samples come from one warm parser per recording, as the daemon's. Reports the best-of-rounds CPU time per snapshot;
with --against, an older window.py's snapshot() and this one's, interleaved in one process (the machine's other
load only adds time, so the minimum of each is compared), after checking both give equal snapshots on every frame,
then Pipeline.observe per target-scrape (parse, store, inventory and the advisor's snapshot) with each, for the
first recording.
Defaults: the shipped demo recordings and the shared vllm-0.32-cpu ones when present.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's kvdoctor, not an installed one

from kvdoctor.ingest.parse import Parser  # noqa: E402
from kvdoctor.ingest.recording import load_frames  # noqa: E402
from kvdoctor.pipeline import Pipeline  # noqa: E402
from kvdoctor.rules.loader import default_rule_files, load_files  # noqa: E402
from kvdoctor.samples import Sample  # noqa: E402
from kvdoctor.whatif import advisor as advisor_module  # noqa: E402
from kvdoctor.whatif import window  # noqa: E402
from kvdoctor.whatif.advisor import Advisor  # noqa: E402

SHARED = Path("/work/shared/recordings/vllm-0.32-cpu")
Frames = list[tuple[float, list[Sample]]]


def _frames(path: Path, limit: int = 60) -> Frames:
    parser = Parser()
    return [(f.t, parser.parse(f.text).samples) for f in load_frames(path) if f.text][:limit]


def _best(fn: Callable[..., object], frames: Frames) -> float:
    start = time.process_time()
    for t, samples in frames:
        fn(t, samples)
    return (time.process_time() - start) / len(frames)


def _module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("old_window", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["old_window"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _same(old: ModuleType, frames: Frames) -> None:
    for t, samples in frames:
        a, b = old.snapshot(t, samples), window.snapshot(t, samples)
        if (a.t, a.flat, a.buckets, a.info, a.engines) != (b.t, b.flat, b.buckets, b.info, b.engines):
            raise SystemExit(f"snapshots differ at t={t}")


def _observe(fn: Callable[..., object], texts: list[tuple[float, str]], rounds: int = 5) -> float:
    """CPU per target per scrape of Pipeline.observe (parse, store, inventory, snapshot) with fn as the snapshot."""
    pipe = Pipeline(load_files(default_rule_files()), advisor=Advisor(background=True))
    span = texts[-1][0] - texts[0][0] + 15.0
    best = float("inf")
    advisor_module.snapshot = fn  # type: ignore[assignment]
    try:
        for r in range(rounds + 1):  # the first round warms the parsers' caches, as a running daemon's are
            start = time.process_time()
            for t, text in texts:
                for target in range(10):
                    pipe.observe(f"t{target}", t + r * span, text)
            if r:
                best = min(best, (time.process_time() - start) / len(texts) / 10)
    finally:
        advisor_module.snapshot = window.snapshot
    return best


def pipeline(old: ModuleType, path: Path) -> None:
    """Pipeline.observe per target-scrape with the old and the new snapshot, interleaved."""
    texts = [(f.t, f.text) for f in load_frames(path) if f.text][:20]
    best = {"old": float("inf"), "new": float("inf")}
    for _ in range(3):
        for kind, fn in (("old", old.snapshot), ("new", window.snapshot)):
            best[kind] = min(best[kind], _observe(fn, texts))
    print(
        f"Pipeline.observe, {path.name}: old {best['old'] * 1e3:.3f} ms, new {best['new'] * 1e3:.3f} ms "
        f"per target-scrape, saved {(best['old'] - best['new']) * 1e3:.3f} ms"
    )


def main() -> None:
    args = sys.argv[1:]
    old = None
    if args[:1] == ["--against"]:
        old, args = _module(args[1]), args[2:]
    paths = [Path(p) for p in args] or [
        *sorted((ROOT / "kvdoctor" / "demo").glob("*.jsonl.gz")),
        *sorted(SHARED.glob("*.jsonl.gz")),
    ]
    for path in paths:
        frames = _frames(path)
        per_frame = sum(len(s) for _, s in frames) / len(frames)
        fns = {"new": window.snapshot}
        if old is not None:
            _same(old, frames)
            fns = {"old": old.snapshot, **fns}
        best = dict.fromkeys(fns, float("inf"))
        for _ in range(9):  # interleaved: a burst of other load hits both alike
            for kind, fn in fns.items():
                best[kind] = min(best[kind], _best(fn, frames))
        name = f"{path.parent.name}/{path.name}"
        line = f"{name:44} {per_frame:4.0f} samples  " + "  ".join(
            f"{k} {v * 1e3:.3f} ms" for k, v in best.items()
        )
        if old is not None:
            line += f"  new/old {best['new'] / best['old']:.2f}"
        print(line)
    if old is not None:
        pipeline(old, paths[0])


if __name__ == "__main__":
    main()
