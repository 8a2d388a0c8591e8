"""The one table of vLLM metric families against the rule pack, and the inventory and what-if that read it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kvdoctor.ingest.parse import Parser
from kvdoctor.ingest.recording import load_frames
from kvdoctor.pipeline import Pipeline
from kvdoctor.rules.loader import default_rule_files
from kvdoctor.vllm_metrics import ALIASES, FAMILIES, family_of
from kvdoctor.whatif.window import snapshot

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = ROOT / "tests/fixtures/recordings"
NAME = re.compile(r"vllm:[a-z_]+")


def _exprs() -> list[tuple[str, str]]:
    out = []
    for path in default_rule_files():
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                out.append((rule.get("record") or rule.get("alert"), rule["expr"]))
    return out


def test_every_vllm_name_the_pack_reads_is_in_the_table() -> None:
    unknown = sorted({n for _, e in _exprs() for n in NAME.findall(e) if family_of(n) is None})
    assert unknown == [], f"add these families to kvdoctor/vllm_metrics.py: {unknown}"


def test_the_pack_reads_every_renamed_family_by_all_its_names_newest_first() -> None:
    problems = []
    for rule, expr in _exprs():
        for fam in (f for f in FAMILIES if len(f.names) > 1):
            # where in the expression each of the family's names first occurs (any histogram series)
            first: dict[str, int] = {}
            for m in NAME.finditer(expr):
                if family_of(m.group()) is fam:
                    name = next(n for n in fam.names if m.group().startswith(n))
                    first.setdefault(name, m.start())
            if not first:
                continue
            if set(first) != set(fam.names):
                problems.append(
                    f"{rule}: reads {sorted(first)} but not {sorted(set(fam.names) - set(first))}"
                )
            elif sorted(first, key=first.__getitem__) != list(fam.names):
                problems.append(f"{rule}: {fam.key} names not newest first")
    assert problems == []


def test_renamed_families_in_the_table_are_the_ones_the_pack_merges() -> None:
    merged = set()
    for _, expr in _exprs():
        fams = {
            f.key for f in (family_of(n) for n in NAME.findall(expr)) if f is not None and len(f.names) > 1
        }
        merged |= fams
    assert merged <= set(ALIASES)
    assert {"kv", "itl", "prefix_hits", "prefix_queries"} == set(ALIASES)


def _last_frame(directory: Path) -> tuple[Path, str]:
    path = sorted(directory.glob("*.jsonl.gz"))[0]
    frames = [f for f in load_frames(path) if f.text]
    return path, frames[-1].text or ""


@pytest.mark.parametrize(
    "version", ["vllm-0.8.5-cpu", "vllm-0.10.2-cpu", "vllm-0.16-cpu-field", "vllm-0.32-cpu-whatif"]
)
def test_the_inventory_finds_every_needed_family_under_each_versions_names(version: str) -> None:
    path, text = _last_frame(RECORDINGS / version)
    pipeline = Pipeline([])
    pipeline.observe("t:8000", 100.0, text)
    assert pipeline.targets["t:8000"].missing == [], path.name


def test_the_inventory_names_a_family_the_scrape_lacks() -> None:
    _, text = _last_frame(RECORDINGS / "vllm-0.32-cpu-whatif")
    kept = "\n".join(line for line in text.splitlines() if "kv_cache_usage_perc" not in line)
    pipeline = Pipeline([])
    pipeline.observe("t:8000", 100.0, kept + "\n")
    assert pipeline.targets["t:8000"].missing == ["KV usage"]


@pytest.mark.parametrize("version", ["vllm-0.8.5-cpu", "vllm-0.10.2-cpu", "vllm-0.32-cpu-whatif"])
def test_the_whatif_reads_kv_usage_and_itl_under_each_versions_names(version: str) -> None:
    _, text = _last_frame(RECORDINGS / version)
    samples = Parser().parse(text).samples
    snap = snapshot(100.0, samples)
    newest = {s.name for s in samples}
    kv = next(n for n in ALIASES["kv"] if n in newest)  # the first name the server exposes wins
    assert snap.get("kv") == max(s.value for s in samples if s.name == kv)
    itl = next(n for n in ALIASES["itl"] if n + "_bucket" in newest)
    assert snap.buckets[itl] and sum(snap.buckets[itl].values()) > 0
