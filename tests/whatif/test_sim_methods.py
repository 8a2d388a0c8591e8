"""#20's done line for the simulation: no function or method of it runs over 60 lines (a reader holds one phase)."""

from __future__ import annotations

import ast
from pathlib import Path

WHATIF = Path(__file__).resolve().parents[2] / "kvdoctor" / "whatif"
# the simulation: the engine loop, vLLM's scheduler phases, its running list, the lockstep queue, block accounting,
# the block pool and the arrivals
SIMULATION = ("sim", "scheduler", "running", "lockstep", "kvcache", "blocks", "arrivals")
MAX_LINES = 60


def test_no_method_of_the_simulation_is_over_60_lines() -> None:
    long = []
    for name in SIMULATION:
        path = WHATIF / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"whatif/{name}.py:{node.lineno} {node.name}: {lines} lines")
    assert not long, long
