"""The synthetic fleet the fleet benchmarks share: real vLLM 0.32 recordings, thinned, copied per target."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdoctor.capacity.live import CACHE_INFO  # noqa: E402
from kvdoctor.ingest.parse import Parser  # noqa: E402
from kvdoctor.ingest.recording import load_frames  # noqa: E402
from kvdoctor.pipeline import EXPECTED  # noqa: E402
from kvdoctor.rules.loader import default_rule_files  # noqa: E402

RECORDINGS = ("kv_bound", "batch_cap", "healthy", "compute_bound")
PACK = default_rule_files()[0]


def recording_dir() -> Path:
    """The shared recordings when present, else the copies shipped for the demo."""
    shared = ROOT.parent / "shared" / "recordings" / "vllm-0.32-cpu"
    return shared if (shared / "kv_bound.jsonl.gz").exists() else ROOT / "kvdoctor" / "demo"


def kept_names() -> set[str]:
    """The vLLM sample names the pack's rules and the Prometheus source read."""
    names = set(re.findall(r"vllm:[a-z_:]*[a-z_]", PACK.read_text()))
    names |= {CACHE_INFO} | {a.replace("_bucket", "_count") for alts in EXPECTED.values() for a in alts}
    return names


class Template:
    """One real recording, thinned: frame offsets (s), exposition texts, and the kept series per frame."""

    def __init__(self, path: Path, span: float, step: float, keep: set[str]) -> None:
        frames = [f for f in load_frames(path) if f.text is not None]
        end = frames[-1].t
        self.offsets: list[float] = []
        self.texts: list[str] = []
        next_t = end - span
        for f in frames:
            if f.t >= next_t:
                self.offsets.append(round(f.t - (end - span), 3))
                self.texts.append(f.text or "")
                next_t = f.t + step - 0.5
        # sample name -> label text -> [(frame index, value)]
        self.series: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
        parser = Parser()
        for k, text in enumerate(self.texts):
            for s in parser.parse(text).samples:
                if s.name in keep:
                    labels = ",".join(f'{n}="{_esc(v)}"' for n, v in s.labels)
                    self.series[s.name][labels].append((k, s.value))


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def fleet(n: int) -> list[tuple[str, int, float]]:
    """(instance, template index, scrape phase in s) per target."""
    return [(f"vllm-{i:04d}:8000", i % len(RECORDINGS), (i * 37 % 1000) / 1000) for i in range(n)]
