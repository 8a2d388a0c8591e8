"""The rule pack: promtool accepts it and its unit tests pass, in Prometheus and in kvdoctor's own engine alike."""

from __future__ import annotations

import copy
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kvdoctor.config.durations import parse_duration
from kvdoctor.rules.evaluate import RuleEngine
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.samples import Sample
from kvdoctor.store import Store

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "promtool" / "kvdoctor_test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")


@needs_promtool
def test_promtool_check_rules():
    out = subprocess.run(
        [PROMTOOL, "check", "rules", *map(str, default_rule_files())], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_promtool_test_rules():
    out = subprocess.run([PROMTOOL, "test", "rules", str(UNIT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _expand(values: str) -> list[float | None]:
    """promtool's expanding notation: `a+bxN`, `a-bxN`, `axN`, `_`, `stale`, plain numbers."""
    out: list[float | None] = []
    for tok in values.split():
        m = re.fullmatch(r"(-?[\d.]+(?:e[+-]?\d+)?)(?:([+-])([\d.]+(?:e[+-]?\d+)?))?x(\d+)", tok)
        if m:
            a, sign, b, n = float(m.group(1)), m.group(2), float(m.group(3) or 0), int(m.group(4))
            step = -b if sign == "-" else b
            out += [a + step * i for i in range(n + 1)]
        elif tok in ("_", "stale"):
            out.append(None)
        else:
            out.append(float(tok))
    return out


def _series(spec: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    name, _, rest = spec.partition("{")
    return name, tuple(re.findall(r'(\w+)="([^"]*)"', rest))


def _labels_of(spec: str) -> dict[str, str]:
    name, labels = _series(spec)
    out = dict(labels)
    if name:
        out["__name__"] = name
    return out


CASES = yaml.safe_load(UNIT.read_text())["tests"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_same_unit_tests_pass_in_kvdoctors_engine(case):
    interval = parse_duration(case.get("interval", "15s"))
    store = Store(retention_s=1e9)
    engine = RuleEngine(load_files(default_rule_files()), store)
    series = [(_series(s["series"]), _expand(s["values"])) for s in case["input_series"]]
    checks = [(parse_duration(c["eval_time"]), "expr", c) for c in case.get("promql_expr_test", [])]
    checks += [(parse_duration(c["eval_time"]), "alert", c) for c in case.get("alert_rule_test", [])]
    horizon = max(t for t, _, _ in checks)
    steps = int(horizon / interval) + 1
    results = {}
    for i in range(steps):
        t = i * interval
        for j, ((name, labels), vals) in enumerate(series):
            if i < len(vals) and vals[i] is not None:
                store.ingest(f"input{j}", round(t * 1000), [Sample(name, labels, vals[i])], staleness=False)
        results[t] = copy.deepcopy(engine.evaluate(t))  # alerts are updated in place by later evaluations
    for t, kind, check in checks:
        if kind == "alert":
            got = [
                {k: v for k, v in a.labels.items() if k != "alertname"}
                for a in results[t].alerts
                if a.rule == check["alertname"] and a.state == "firing"
            ]
            want = [a["exp_labels"] for a in check["exp_alerts"]]
            canon = sorted(sorted(d.items()) for d in got), sorted(sorted(d.items()) for d in want)
            assert canon[0] == canon[1], (t, check["alertname"])
            for a in results[t].alerts:
                for exp in check["exp_alerts"]:
                    if (
                        a.rule == check["alertname"]
                        and {k: v for k, v in a.labels.items() if k != "alertname"} == exp["exp_labels"]
                    ):
                        assert a.annotations == exp["exp_annotations"]
        else:
            from kvdoctor.query import instant_query

            data = instant_query(store, check["expr"], t)
            got = {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["result"]}
            want = {
                tuple(sorted(_labels_of(s["labels"]).items())): float(s["value"])
                for s in check["exp_samples"]
            }
            assert set(got) == set(want), check["expr"]
            for k, v in want.items():
                assert math.isclose(got[k], v, rel_tol=1e-9), (check["expr"], got[k], v)
