"""One table of supported PromQL functions: what the load-time check accepts is exactly what the evaluator runs."""

from __future__ import annotations

import promql_parser as pp
import pytest

from kvdoctor.promql import calls
from kvdoctor.promql.check import ExprError, check_expr
from kvdoctor.promql.engine import Evaluator
from kvdoctor.promql.values import EvalError
from kvdoctor.samples import Sample
from kvdoctor.store import Store


def _store() -> Store:
    st = Store()
    st.ingest(
        "a", 1_000_000, [Sample("up", (("instance", "b"),), 1.0), Sample("up", (("instance", "a"),), 0.0)]
    )
    return st


def test_a_function_in_the_table_loads_and_runs():
    check_expr("sort_desc(up)")
    got = Evaluator(_store()).instant(pp.parse("sort_desc(up)"), 1_000_000)
    assert [e.v for e in got] == [1.0, 0.0]  # type: ignore[union-attr]


def test_taking_a_function_out_of_the_table_refuses_it_at_load_time_and_at_evaluation(monkeypatch):
    monkeypatch.delitem(calls.INSTANT_FUNCTIONS, "sort_desc")
    with pytest.raises(ExprError, match=r"sort_desc\(\) is not supported"):
        check_expr("sort_desc(up)")
    with pytest.raises(EvalError, match="unsupported function sort_desc"):
        Evaluator(_store()).instant(pp.parse("sort_desc(up)"), 1_000_000)


def test_prometheus_functions_outside_the_table_are_refused_with_their_position():
    with pytest.raises(ExprError, match=r"timestamp\(\) is not supported.*column 5"):
        check_expr("1 + timestamp(up)")
