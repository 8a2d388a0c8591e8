"""Every dashboard query returns data from a real Prometheus backfilled with real recordings.

Prometheus holds (a) raw vLLM series of real recordings (0.32, a copy of one renamed to the pre-0.9.2/0.11 names,
and the older-version fixtures when committed), (b) the rule pack's recording rules over them
(`promtool tsdb create-blocks-from rules`, layer by layer, Prometheus restarted in between) and (c) kvdoctor's
replayed `kvdoctor_*` series (kvdoctor.export.openmetrics). Each query runs with `$__rate_interval` = 1m and
`$target`/`$model_name` set to one real target at an instant inside its labelled window.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvdoctor.export.openmetrics import export_openmetrics
from tests.conftest import FIXTURES, SHARED, labelled_windows
from tests.support.dashboards import RULES, dashboard_files, load, metric_names, queries, substitute
from tests.support.openmetrics import read_frames, recordings_to_openmetrics
from tests.support.pipelines import replay_all
from tests.support.prometheus import PrometheusServer, backfill, binaries

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # backfills a Prometheus first: ~20 s

EVERY = 3  # keep every 3rd scrape (3 s apart): plenty for 1m rates, a third of the parse time
NEW_032 = ("kv_bound", "batch_cap", "compute_bound", "healthy")
LEGACY_SOURCE = "prefix_cache_shared"
LEGACY = "legacy_names"  # a 0.32 recording with the names vLLM used before v0.9.2 / v0.11
RENAMES = (
    ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    ("vllm:prefix_cache_", "vllm:gpu_prefix_cache_"),
)
OLD_NAMES = {
    "vllm:gpu_cache_usage_perc",
    "vllm:time_per_output_token_seconds_bucket",
    "vllm:gpu_prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_queries_total",
}
# Panels that can only be empty on the recordings we have, and why (the test fails once a recording has data).
# Panels that may legitimately be empty on every recording: (family, why). The spec-decode panel is fed by the
# vllm-0.32-cpu-specdecode fixture; headroom exists only for targets with an SLO, which no replayed target has here.
EXPECTED_EMPTY: dict[str, tuple[str, str]] = {
    "SLO headroom": (
        "kvdoctor_slo_headroom_ratio",
        "the replayed targets configure no SLO (tests/whatif/test_headroom.py reads the series off /metrics)",
    ),
}
FIXTURE_PREFERENCE = ("kv_cache", "batch_cap", "healthy", "compute")


@dataclass
class Target:
    """A loaded target: its name (vLLM `instance` = kvdoctor `target`), probe instant, model and origin."""

    name: str
    t: float
    origin: str  # "0.32", "legacy" or a fixture directory name
    model: str = ""


def _derive(src: Path, out: Path, renames: tuple[tuple[str, str], ...] = ()) -> None:
    """Thin a recording and keep only vLLM families, optionally renaming them, as a .jsonl recording."""
    with out.open("w", encoding="utf-8") as fh:
        for i, (t, text) in enumerate(read_frames(src)):
            if i % EVERY:
                continue
            lines = [
                ln for ln in text.splitlines() if ln.startswith(("vllm:", "# HELP vllm:", "# TYPE vllm:"))
            ]
            body = "\n".join(lines) + "\n"
            for old, new in renames:
                body = body.replace(old, new)
            fh.write(json.dumps({"t": t, "text": body}) + "\n")


def _select(tmp: Path) -> tuple[list[Path], list[Target]]:
    windows = {(w["dir"], w["path"].name.split(".")[0]): w for w in labelled_windows()}
    paths, targets = [], []

    def add(key: tuple[str, str], name: str, origin: str, renames: tuple[tuple[str, str], ...] = ()) -> None:
        w = windows[key]
        out = tmp / f"{name}.jsonl"
        _derive(w["path"], out, renames)
        paths.append(out)
        targets.append(Target(name, w["steady_to"], origin))

    for stem in NEW_032:
        add(("vllm-0.32-cpu", stem), stem, "0.32")
    add(("vllm-0.32-cpu", LEGACY_SOURCE), LEGACY, "legacy", RENAMES)
    fixture_dirs = sorted({d for d, _ in windows if (FIXTURES / "recordings" / d).is_dir()})
    for d in fixture_dirs:
        entries = sorted((k for k in windows if k[0] == d), key=lambda k: _rank(windows[k]["expected"]))
        for key in entries[:3]:
            add(key, f"{d}--{key[1]}", d)
    return paths, targets


def _rank(expected: str) -> int:
    return FIXTURE_PREFERENCE.index(expected) if expected in FIXTURE_PREFERENCE else len(FIXTURE_PREFERENCE)


def rule_layers(needed: set[str]) -> list[list[dict[str, Any]]]:
    """The recording rules `needed` depends on, in layers each depending only on earlier ones."""
    doc = yaml.safe_load(RULES.read_text())
    rules = {r["record"]: r for g in doc["groups"] for r in g["rules"] if "record" in r}
    deps = {
        n: set(re.findall(r"kvdoctor:[a-z0-9_:]*[a-z0-9_]", r["expr"])) & set(rules) - {n}
        for n, r in rules.items()
    }
    closure: set[str] = set()
    todo = set(needed)
    while todo:
        n = todo.pop()
        closure.add(n)
        todo |= deps[n] - closure
    layers, done = [], set()
    while closure - done:
        layer = sorted(n for n in closure - done if deps[n] <= done)
        assert layer, f"circular recording rules: {closure - done}"
        layers.append([{"record": n, "expr": rules[n]["expr"]} for n in layer])
        done |= set(layer)
    return layers


def _backfill_rules(
    prom: PrometheusServer, promtool: str, layer: list[dict[str, Any]], start: int, end: int, work: Path
) -> None:
    rules = work / "layer.rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "layer", "interval": "15s", "rules": layer}]}))
    out = work / "blocks"
    cmd = [
        promtool,
        "tsdb",
        "create-blocks-from",
        "rules",
        f"--start={start}",
        f"--end={end}",
        f"--url={prom.url}",
        f"--output-dir={out}",
        "--quiet",
        str(rules),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prom.stop()
    for block in out.iterdir():
        shutil.move(str(block), prom.storage / block.name)
    shutil.rmtree(out)
    prom.start()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A Prometheus with raw vLLM, rule-pack and kvdoctor series; the loaded targets."""
    found = binaries()
    if found is None:
        pytest.skip("prometheus/promtool not on PATH (scripts/test.sh installs Debian's prometheus)")
    if not (SHARED / "vllm-0.32-cpu" / "labels.json").exists():
        pytest.skip("../shared/recordings/vllm-0.32-cpu not present")
    prom_bin, promtool = found
    work = tmp_path_factory.mktemp("dashboards")
    rec_dir = work / "recordings"
    rec_dir.mkdir()
    paths, targets = _select(rec_dir)
    storage = work / "tsdb"
    raw = recordings_to_openmetrics([(str(p), p.stem, 0.0) for p in paths], work / "vllm.om")
    backfill(work / "vllm.om", storage, promtool=promtool)
    with (work / "kvdoctor.om").open("w", encoding="utf-8") as fh:
        export_openmetrics(replay_all(paths), fh, {p.stem: f"replay://{p.name}" for p in paths})
    backfill(work / "kvdoctor.om", storage, promtool=promtool)
    needed = {n for f in dashboard_files() for _, t in queries(load(f)) for n in metric_names(t["expr"])}
    prom = PrometheusServer(storage, work, binary=prom_bin)
    prom.start()
    try:
        start, end = (raw.min_ms or 0) // 1000, (raw.max_ms or 0) // 1000 + 1
        for layer in rule_layers({n for n in needed if n.startswith("kvdoctor:")}):
            _backfill_rules(prom, promtool, layer, start, end, work)
        for tg in targets:
            res = prom.query(f'group by (model_name) (kvdoctor_bottleneck{{target="{tg.name}"}})', tg.t)[
                "result"
            ]
            assert res, f"no kvdoctor series for {tg.name} at {tg.t}: {prom.log()}"
            tg.model = res[0]["metric"]["model_name"]
        yield prom, targets, raw
    finally:
        prom.stop()


def _results(prom: PrometheusServer, expr: str, tg: Target) -> list[float]:
    q = substitute(expr, {"target": tg.name, "model_name": tg.model}, rate_interval="1m")
    data = prom.query(q, tg.t)
    if data["resultType"] == "scalar":
        return [float(data["result"][1])]
    return [float(r["value"][1]) for r in data["result"]]


def _cases() -> list[tuple[str, str, str, str]]:
    return [
        (f.stem, p["title"], t["refId"], t["expr"]) for f in dashboard_files() for p, t in queries(load(f))
    ]


CASES = _cases()


@pytest.mark.parametrize(
    ("board", "title", "ref", "expr"), CASES, ids=[f"{c[0]}:{c[1]}:{c[2]}" for c in CASES]
)
def test_panel_query_returns_data(loaded: Any, board: str, title: str, ref: str, expr: str) -> None:
    prom, targets, raw = loaded
    per_target = {tg.name: _results(prom, expr, tg) for tg in targets}
    finite = {n for n, vs in per_target.items() if any(math.isfinite(v) for v in vs)}
    names = metric_names(expr)
    if title in EXPECTED_EMPTY:
        family, why = EXPECTED_EMPTY[title]
        assert not raw.points(family), f"{family} is now recorded: drop {title!r} from EXPECTED_EMPTY"
        assert not finite, f"{title!r} has data now ({why} no longer holds)"
        pytest.skip(f"{title}: {why}")
    assert finite, f"{board} {title!r} {ref}: empty for every target: {per_target}"
    vllm_only = all(n.startswith("vllm:") for n in names)
    if names & OLD_NAMES:
        # an alias query: the new names on 0.32, the old names on the renamed copy
        assert per_target[LEGACY], f"{title!r} {ref}: empty on the old metric names"
        assert any(per_target[tg.name] for tg in targets if tg.origin == "0.32"), f"{title!r}: empty on 0.32"
    if vllm_only:
        for origin in {tg.origin for tg in targets} - {"0.32", "legacy"}:
            members = {tg.name for tg in targets if tg.origin == origin}
            if not _exports(raw, names, members):
                continue  # that vLLM version does not export these families (V0 CPU has no prefix-cache metrics)
            assert any(per_target[name] for name in members), (
                f"{title!r} {ref}: empty on every {origin} recording"
            )


def _exports(raw: Any, names: set[str], instances: set[str]) -> bool:
    """True when any of the recordings of `instances` carries one of the metric families `names`."""
    for name in names:
        for fam in (name, name + "_bucket", name + "_total", name.removesuffix("_bucket")):
            for labels in raw.points(fam):
                if dict(labels).get("instance") in instances:
                    return True
    return False


def test_loaded_versions(loaded: Any) -> None:
    prom, targets, _raw = loaded
    origins = {tg.origin for tg in targets}
    assert {"0.32", "legacy"} <= origins
    legacy = next(tg for tg in targets if tg.origin == "legacy")
    assert not prom.query(f'vllm:kv_cache_usage_perc{{instance="{legacy.name}"}}', legacy.t)["result"]
    assert prom.query(f'vllm:gpu_cache_usage_perc{{instance="{legacy.name}"}}', legacy.t)["result"]
