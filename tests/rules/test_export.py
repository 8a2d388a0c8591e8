"""`kvdoctor rules export`: promtool accepts the export and its unit tests pass on it; the PrometheusRule carries the pack."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kvdoctor.cli import main
from kvdoctor.rules.loader import default_rule_files

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "promtool" / "kvdoctor_test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
PACK = yaml.safe_load(default_rule_files()[0].read_text())


def _export(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "export"
    assert main(["rules", "export", *args, "-o", str(out)]) == 0
    return out


def _unit_tests_against(rules: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the pack's promtool unit tests with rule_files pointing at `rules`."""
    doc = yaml.safe_load(UNIT.read_text())
    assert doc["rule_files"] == ["../../rules/kvdoctor.yml"]
    doc["rule_files"] = [rules.name]
    test = rules.parent / "kvdoctor_test.yml"
    test.write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run(
        [PROMTOOL, "test", "rules", str(test)], capture_output=True, text=True, cwd=rules.parent
    )


def test_plain_export_is_the_pack_verbatim(tmp_path, capsys):
    out = _export(tmp_path)
    assert [p.name for p in out.iterdir()] == ["kvdoctor.yml"]
    assert (out / "kvdoctor.yml").read_text() == default_rule_files()[0].read_text()
    assert main(["rules", "export"]) == 0
    assert capsys.readouterr().out == default_rule_files()[0].read_text()


@needs_promtool
def test_promtool_checks_the_export_and_it_is_the_unit_tested_pack(tmp_path):
    # the pack's promtool unit tests take ~8 s of CPU; tests/rulepack runs them on rules/kvdoctor.yml, and the plain
    # export is that file byte for byte, so they run here only on the operator export, whose YAML is rewritten
    rules = _export(tmp_path) / "kvdoctor.yml"
    check = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True)
    n = sum(len(g["rules"]) for g in PACK["groups"])
    assert check.returncode == 0 and f"SUCCESS: {n} rules found" in check.stdout, check.stdout + check.stderr
    assert rules.read_bytes() == default_rule_files()[0].read_bytes()
    assert yaml.safe_load(UNIT.read_text())["rule_files"] == ["../../rules/kvdoctor.yml"]
    assert (UNIT.parent / "../../rules/kvdoctor.yml").read_bytes() == rules.read_bytes()


def test_prometheus_operator_export(tmp_path):
    out = _export(
        tmp_path,
        "--format",
        "prometheus-operator",
        "--namespace",
        "monitoring",
        "--label",
        "release=prometheus",
    )
    [path] = list(out.iterdir())
    doc = yaml.safe_load(path.read_text())
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    assert doc["metadata"]["name"] == "kvdoctor" and doc["metadata"]["namespace"] == "monitoring"
    assert doc["metadata"]["labels"]["release"] == "prometheus"
    assert doc["spec"]["groups"] == PACK["groups"]
    assert list(doc) == ["apiVersion", "kind", "metadata", "spec"]


@needs_promtool
def test_prometheus_operator_groups_pass_promtool(tmp_path):
    path = next(_export(tmp_path, "--format", "prometheus-operator").iterdir())
    rules = tmp_path / "from-operator" / "kvdoctor.yml"
    rules.parent.mkdir()
    rules.write_text(yaml.safe_dump({"groups": yaml.safe_load(path.read_text())["spec"]["groups"]}))
    check = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    unit = _unit_tests_against(rules, tmp_path)
    assert unit.returncode == 0, unit.stdout + unit.stderr


def test_interval_override_keeps_every_rule(tmp_path):
    doc = yaml.safe_load((_export(tmp_path, "--interval", "1s") / "kvdoctor.yml").read_text())
    assert {g["interval"] for g in doc["groups"]} == {"1s"}
    assert [g["rules"] for g in doc["groups"]] == [g["rules"] for g in PACK["groups"]]


def test_bad_input_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yml"
    bad.write_text("groups:\n  - name: g\n    rules:\n      - record: x\n        expr: sum(\n")
    assert main(["rules", "export", "--rules", str(bad)]) == 2
    assert f"{bad}:" in capsys.readouterr().err
    assert main(["rules", "export", "--label", "novalue"]) == 2
    assert main(["rules", "export", "--interval", "soon"]) == 2
