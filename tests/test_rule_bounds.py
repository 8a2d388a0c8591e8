"""Rules bounded before they run: size and depth refused at load with file:line, and a rule that raises fails alone.

Before: a 400-term sum loaded and then raised RecursionError in every evaluation (no diagnosis for anyone); a
3,000-term sum with a typo took over 8 minutes to refuse; 1,200 nested parentheses were a RecursionError (HTTP 500,
no file:line, missing from the reload history) and a traceback from `config check` and `kvdoctor query`.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import promql_parser as pp
import pytest
import requests
from prometheus_client import generate_latest

from kvdoctor.cli import main
from kvdoctor.config import Config, TargetSpec
from kvdoctor.config.schema import Overrides
from kvdoctor.daemon.reload import load_off_thread
from kvdoctor.daemon.runner import load_everything
from kvdoctor.errors import ValidationError
from kvdoctor.pipeline import Pipeline
from kvdoctor.promql.check import ExprError, check_expr
from kvdoctor.replay import replay
from kvdoctor.rules.loader import RuleGroup, RuleLoadError, default_rule_files, load_files
from kvdoctor.status.exposition import make_registry
from kvdoctor.status.state import DaemonState
from kvdoctor.web import WebServer
from tests.support.daemon import Daemons

SUM_400 = " + ".join(f"vllm:num_requests_running{{n='{i}'}}" for i in range(400))
SUM_3000_TYPO = "sum(" + " + ".join(f"m{i}" for i in range(3000)) + " x)"  # `x`: no operator before it
NESTED_1200 = "(" * 1200 + "up" + ")" * 1200


def rule_file(path: Path, expr: str) -> Path:
    """A one-rule file; the expression is on line 5 and the rule starts on line 4."""
    path.write_text(f'groups:\n  - name: g\n    rules:\n      - record: deep\n        expr: "{expr}"\n')
    return path


@pytest.mark.parametrize(
    "expr", [SUM_400, SUM_3000_TYPO, NESTED_1200], ids=["400-term", "3000-term-typo", "1200-deep"]
)
def test_deep_rules_are_refused_at_load_with_file_and_line(tmp_path: Path, expr: str) -> None:
    path = rule_file(tmp_path / "deep.yml", expr)
    with pytest.raises(RuleLoadError) as err:
        load_files([path])
    (message,) = err.value.errors
    assert message.startswith(f"{path}:4: rule 'deep': expr expression nested deeper than 100 levels")


def test_an_expression_over_64_kib_is_refused_before_parsing() -> None:
    with pytest.raises(ExprError, match=r"expression is 70,003 bytes, over the limit of 65,536"):
        check_expr("x{" + "a" * 70_000 + "}")


def test_the_error_in_a_long_shallow_expression_is_placed_exactly() -> None:
    # 3,000 matchers (40 KB, one level deep) and a stray word at the end: found by parsing a few prefixes, not all
    expr = "x{" + ", ".join(f'a{i}="v{i}"' for i in range(3000)) + "} typo"
    with pytest.raises(ExprError) as err:
        check_expr(expr)
    assert (err.value.line, err.value.col) == (1, expr.index("typo") + 1)
    with pytest.raises(ExprError) as err:
        check_expr("sum(rate(x[5m])) +* 3")
    assert err.value.col == 18


def test_the_shipped_pack_is_within_the_bounds() -> None:
    assert sum(len(g.rules) for g in load_files(default_rule_files())) > 50


def test_config_check_and_query_refuse_deep_input_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shared_032: Path
) -> None:
    rules = rule_file(tmp_path / "deep.yml", NESTED_1200)
    cfg = tmp_path / "kvdoctor.yml"
    cfg.write_text(f"targets: ['http://127.0.0.1:9/metrics']\nrules: ['{rules}']\n")
    assert main(["config", "check", str(cfg)]) == 2
    out = capsys.readouterr()
    assert f"{rules}:4: rule 'deep': expr expression nested deeper than 100 levels" in out.out + out.err
    assert "Traceback" not in out.out + out.err
    assert main(["query", str(shared_032 / "healthy.jsonl.gz"), NESTED_1200]) == 2
    out = capsys.readouterr()
    assert (
        "kvdoctor query: expression nested deeper than 100 levels" in out.err and "Traceback" not in out.err
    )
    assert "(at line 1, column 101)" in out.err


def _with_deep_rule(groups: list[RuleGroup]) -> list[RuleGroup]:
    """The shipped pack with a 400-term sum put first in its first group, as a pack loaded before the bound was."""
    first = groups[0]
    deep = dataclasses.replace(first.rules[0], name="deep:sum400", expr=SUM_400, ast=pp.parse(SUM_400))
    return [dataclasses.replace(first, rules=[deep, *first.rules]), *groups[1:]]


def test_a_rule_whose_evaluation_raises_fails_alone(shared_032: Path) -> None:
    recording = shared_032 / "kv_bound.jsonl.gz"
    shipped = list(replay(Pipeline(load_files(default_rule_files())), [recording], interval_s=5.0))
    cycles = list(
        replay(Pipeline(_with_deep_rule(load_files(default_rule_files()))), [recording], interval_s=5.0)
    )
    assert len(cycles) == len(shipped) > 3
    for ours, theirs in zip(cycles, shipped, strict=True):
        assert ours.evaluation.failed == ["deep:sum400"]
        assert "too deeply nested to evaluate (RecursionError)" in ours.evaluation.errors[0]
        # every other rule of the group and the pack evaluated: the same verdicts as without the bad rule
        assert [d.verdict for d in ours.diagnoses] == [d.verdict for d in theirs.diagnoses]
    assert "kv_cache" in {d.verdict for c in cycles for d in c.diagnoses}
    state = DaemonState()
    for c in cycles[:3]:
        state.publish(c.diagnoses, c.t, 0.1, c.evaluation.failed_rules())
    metrics = generate_latest(make_registry(state)).decode()  # type: ignore[arg-type]
    assert 'kvdoctor_rule_evaluation_failures_total{rule="deep:sum400"} 3.0' in metrics


def test_a_deep_reload_is_refused_with_file_line_and_recorded(daemons: Daemons, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(default_rule_files()[0].read_text())
    cfg_file = tmp_path / "kvdoctor.yml"
    cfg_file.write_text(f"targets: ['http://127.0.0.1:9/metrics']\nrules: ['{rules}']\n")
    cfg, groups = load_everything(str(cfg_file), Overrides())
    d = daemons(cfg, groups, str(cfg_file), Overrides())
    rule_file(rules, NESTED_1200)
    web = WebServer(
        d.state, d.registry, listen="127.0.0.1:0", reload=d.reload
    )  # POST /-/reload as an operator
    web.start()
    try:
        r = requests.post(web.url + "-/reload", timeout=30)
        status = requests.get(web.url + "api/v1/status", timeout=5).json()["data"]
        metrics = requests.get(web.url + "metrics", timeout=5).text
    finally:
        web.stop()
    assert (
        r.status_code == 500
        and f"{rules}:4: rule 'deep'" in r.text
        and "nested deeper than 100 levels" in r.text
    )
    assert "RecursionError" not in r.text
    (attempt,) = status["reload"]["attempts"]
    assert attempt["ok"] is False and f"{rules}:4" in attempt["message"]
    assert 'kvdoctor_config_reloads_total{outcome="failure"} 1.0' in metrics
    assert d.pipeline.rules.groups == groups  # the running pack stays


def test_a_reload_check_gives_up_at_its_deadline_and_on_stop(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(default_rule_files()[0].read_text())
    cfg_file = tmp_path / "kvdoctor.yml"
    cfg_file.write_text(f"targets: ['http://127.0.0.1:9/metrics']\nrules: ['{rules}']\n")
    running = Config(targets=[TargetSpec(url="http://127.0.0.1:9/metrics")])
    stop = threading.Event()
    with pytest.raises(ValidationError, match=r"took over 0s|ran past its deadline"):
        load_off_thread(str(cfg_file), Overrides(), running, stop, timeout_s=0.0)
    stop.set()
    with pytest.raises(ValidationError, match=r"reload abandoned: kvdoctor is stopping"):
        load_off_thread(str(cfg_file), Overrides(), running, stop, timeout_s=60.0)


def test_a_firing_alert_whose_rule_starts_failing_keeps_firing(shared_032: Path) -> None:
    pipeline = Pipeline(load_files(default_rule_files()))
    cycles = list(replay(pipeline, [shared_032 / "kv_bound.jsonl.gz"], 5.0))
    firing = {a.rule for a in cycles[-1].evaluation.alerts if a.state == "firing"}
    assert "VLLMKVCacheBound" in firing
    groups = [
        dataclasses.replace(
            g,
            rules=[
                dataclasses.replace(r, ast=pp.parse(SUM_400)) if r.name == "VLLMKVCacheBound" else r
                for r in g.rules
            ],
        )
        for g in pipeline.rules.groups
    ]
    pipeline.set_rules(groups)  # as a reload keeps the alert state of rules that still exist
    later = pipeline.evaluate(cycles[-1].t + 5.0)
    assert "VLLMKVCacheBound" in later.evaluation.failed
    kv = [a for a in later.evaluation.alerts if a.rule == "VLLMKVCacheBound"]
    # not taken for an alert that stopped holding (its keep_firing_for would start counting down)
    assert kv and all(a.state == "firing" and a.keep_since is None for a in kv)
