"""One name per concept: no two classes under the package share a name (a reader greps one and finds one)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kvdoctor"


def test_no_class_name_appears_twice_under_the_package() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert where, "no classes found: is PACKAGE right?"
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, twice
