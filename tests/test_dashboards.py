"""Structure of the committed Grafana dashboards: ids, grid, datasources, variables, metric names, PromQL syntax."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvdoctor.diagnosis.target import Target, TargetFacts
from kvdoctor.status.exposition import DiagnosisCollector, gauges
from kvdoctor.status.state import DaemonState
from kvdoctor.verdicts import VERDICTS, Diagnosis, Finding
from tests.support.dashboards import (
    DASHBOARD_DIR,
    ROOT,
    RULES,
    VARIABLE,
    dashboard_files,
    load,
    metric_names,
    panels,
    queries,
    substitute,
)

PROVISIONING = DASHBOARD_DIR / "provisioning"
VLLM_REFERENCE = ROOT.parent / "shared" / "reference" / "vllm-metrics.md"
SCHEMA_FLOOR = 39  # Grafana migrates older schemas forward; emit nothing newer than the oldest supported
DATASOURCE_UIDS = {"${datasource}", "$datasource", "-- Grafana --"}
_HIST_SUFFIXES = ("_bucket", "_sum", "_count")
# A data table, the class → colour map as the dashboards' value mappings hold it (fmt: skip keeps it two lines).
CLASS_COLOURS = {"unknown": "#8e8e8e", "idle": "blue", "healthy": "green", "batch_cap": "yellow",
                 "compute": "orange", "kv_cache": "red"}  # fmt: skip


def exposed_names() -> set[str]:
    """Family and sample names kvdoctor's /metrics emits (every family populated once)."""
    state = DaemonState()
    evidence = {
        "kv_usage": 0.5,
        "slo_headroom_ttft_p95": 1.3,
        "slo_headroom_timestamp": 1.0,
        "replicas_needed": 2.0,
    }
    finding = Finding("kv_cache", "warning", "s", evidence={"kv_cache_tokens": 1.0})
    state.publish([Diagnosis("t", "m", 1.0, "kv_cache", 1.0, [finding], evidence)], 1.0, 0.1, 0)
    state.set_target(
        Target("t", TargetFacts(url="http://t"), up=True, last_scrape_duration_s=0.1, last_success_ts=1.0)
    )
    names = {n for n, _ in gauges().values()}
    for mf in DiagnosisCollector(state).collect():
        names.update(s.name for s in mf.samples)
    return names


def rule_names() -> set[str]:
    """Recording rules of the shipped pack."""
    doc = yaml.safe_load(RULES.read_text())
    return {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}


def vllm_names() -> set[str]:
    """vLLM names in the reference catalogue, with histogram suffixes."""
    base = set(re.findall(r"vllm:[a-z0-9_]+", VLLM_REFERENCE.read_text(encoding="utf-8")))
    return base | {n + s for n in base for s in _HIST_SUFFIXES}


def _all_strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _all_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _all_strings(v)


def _datasources(obj: Any) -> Iterator[Any]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "datasource":
                yield v
            yield from _datasources(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _datasources(v)


FILES = dashboard_files()
IDS = [p.stem for p in FILES]


def test_both_dashboards_committed() -> None:
    assert {"kvdoctor-fleet", "kvdoctor-instance"} <= set(IDS)


def test_uids_unique_and_top_level() -> None:
    uids = [load(p)["uid"] for p in FILES]
    assert len(uids) == len(set(uids))
    for p in FILES:
        d = load(p)
        assert 8 <= len(d["uid"]) <= 40, p.name
        assert d["id"] is None and d["title"] and isinstance(d["version"], int)
        assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] <= SCHEMA_FLOOR


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_panel_ids_and_grid(path: Path) -> None:
    d = load(path)
    ps = list(panels(d))
    ids = [p["id"] for p in ps]
    assert all(isinstance(i, int) for i in ids) and len(ids) == len(set(ids)), ids
    rects = []
    for p in ps:
        g = p["gridPos"]
        assert 0 < g["w"] <= 24 and g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0 and g["y"] >= 0, p[
            "title"
        ]
        rects.append((p["title"], g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"]))
    for i, a in enumerate(rects):
        for b in rects[i + 1 :]:
            overlap = a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]
            assert not overlap, f"{a[0]!r} overlaps {b[0]!r}"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_datasources_resolvable(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert "${DS_" not in text
    d = load(path)
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    for ds in _datasources(d):
        assert isinstance(ds, dict), f"string datasource {ds!r}"
        assert ds.get("uid") in DATASOURCE_UIDS, ds
    for p in panels(d):
        if p.get("targets"):
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            for t in p["targets"]:
                assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_variables_defined(path: Path) -> None:
    d = load(path)
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["target"]["query"]["query"] == "label_values(kvdoctor_target_up, target)"
    assert "model_name" in variables["model_name"]["query"]["query"]
    for s in _all_strings(d):
        for m in VARIABLE.finditer(s):
            name = m.group(1) or m.group(2)
            assert name.startswith("__") or name in variables, f"undefined ${name} in {s!r}"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_rates_use_rate_interval(path: Path) -> None:
    for p, t in queries(load(path)):
        for rng in re.findall(r"\[([^\]]*)\]", t["expr"]):
            assert rng == "$__rate_interval", f"{p['title']}: [{rng}] in {t['expr']}"
        assert t["refId"] and "legendFormat" in t


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_metric_names_known(path: Path) -> None:
    if not VLLM_REFERENCE.exists():
        pytest.skip("../shared/reference/vllm-metrics.md not present")
    known = exposed_names() | rule_names() | vllm_names()
    for p, t in queries(load(path)):
        names = metric_names(t["expr"])
        unknown = names - known
        assert not unknown, f"{p['title']}: unknown metric names {unknown}"
        for n in names:
            assert n.startswith(("kvdoctor_", "kvdoctor:", "vllm:")), n


def test_bottleneck_mappings_match_codes() -> None:
    for path in FILES:
        for p in panels(load(path)):
            for m in p.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
                opts = m.get("options", {})
                if set(opts) == {str(i) for i in range(len(VERDICTS))}:
                    assert [opts[str(i)]["text"] for i in range(len(VERDICTS))] == list(VERDICTS)
                    assert [opts[str(i)]["color"] for i in range(len(VERDICTS))] == [
                        CLASS_COLOURS[b] for b in VERDICTS
                    ]
    fleet = load(DASHBOARD_DIR / "kvdoctor-fleet.json")
    timelines = [p for p in panels(fleet) if p["type"] == "state-timeline"]
    assert timelines and "kvdoctor_bottleneck_code" in timelines[0]["targets"][0]["expr"]


def test_every_rule_finding_has_advice() -> None:
    doc = yaml.safe_load(RULES.read_text())
    findings = {
        r["labels"]["finding"] for g in doc["groups"] for r in g["rules"] if "finding" in r.get("labels", {})
    }
    inst = load(DASHBOARD_DIR / "kvdoctor-instance.json")
    mapped: set[str] = set()
    for p in panels(inst):
        for o in p.get("fieldConfig", {}).get("overrides", []):
            if o["matcher"].get("options") == "advice":
                for prop in o["properties"]:
                    if prop["id"] == "mappings":
                        mapped |= set(prop["value"][0]["options"])
    assert findings <= mapped, findings - mapped


def test_provisioning_files() -> None:
    ds = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    assert ds["apiVersion"] == 1
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["access"] == "proxy" and source["url"]
    prov = yaml.safe_load((PROVISIONING / "dashboards" / "kvdoctor.yaml").read_text())
    assert prov["apiVersion"] == 1
    (provider,) = prov["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    assert provider["updateIntervalSeconds"] > 10


def test_every_expr_parses_with_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not on PATH (scripts/test.sh installs Debian's prometheus)")
    rules = []
    for path in FILES:
        for i, (_p, t) in enumerate(queries(load(path))):
            rules.append(
                {
                    "record": f"dashboard:{path.stem.replace('-', '_')}:expr_{i}",
                    "expr": substitute(t["expr"], {}),
                }
            )
    assert rules
    out = tmp_path / "dashboards.rules.yml"
    out.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}, sort_keys=False))
    proc = subprocess.run([promtool, "check", "rules", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
