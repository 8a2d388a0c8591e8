"""The embedded PromQL evaluator: promql-parser's AST evaluated over kvdoctor's store, Prometheus 2.x semantics."""
