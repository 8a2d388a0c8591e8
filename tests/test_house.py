"""#20's house rules that a grep at closing time used to check: `# fmt: skip` only on data tables that say so, and
no `sleep` in tests but in a slow test that says why on its line."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("kvdoctor", "tests", "benchmarks", "tools")
MARKER = "# fmt: " + "skip"  # split so this file's own text does not hold one


def _python_files(*trees: str) -> list[Path]:
    return sorted(p for t in trees for p in (ROOT / t).rglob("*.py"))


def _paragraph_above(lines: list[str], start: int) -> list[str]:
    """The non-blank lines right above line `start` (1-based), up to the first blank one."""
    out = []
    i = start - 2
    while i >= 0 and lines[i].strip():
        out.append(lines[i])
        i -= 1
    return out


def fmt_skips_without_a_table(path: Path) -> list[int]:
    """The line of each fmt-skip marker whose statement is not introduced as a data table."""
    text = path.read_text(encoding="utf-8")
    if MARKER not in text:
        return []
    lines = text.splitlines()
    starts: dict[int, int] = {}  # a statement's last line → its first (the outermost statement ending there)
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.stmt) and node.end_lineno is not None:
            starts[node.end_lineno] = min(starts.get(node.end_lineno, node.lineno), node.lineno)
    bad = []
    for n, line in enumerate(lines, 1):
        if MARKER not in line:
            continue
        said = [line[line.index(MARKER) :], *_paragraph_above(lines, starts.get(n, n))]
        if not any("data table" in s.lower() for s in said):
            bad.append(n)
    return bad


def _slow(f: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("slow" in ast.unparse(d) for d in f.decorator_list)


def sleeps_outside_slow_tests(path: Path) -> list[int]:
    """The line of each sleep call in a test module that is not in a slow test with a comment on its line."""
    text = path.read_text(encoding="utf-8")
    if "sleep" not in text:
        return []
    lines, tree = text.splitlines(), ast.parse(text, str(path))
    module_slow = "pytestmark" in text and "slow" in text.split("pytestmark", 1)[1].split("\n", 1)[0]
    allowed: set[int] = set()
    for f in ast.walk(tree):
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and (module_slow or _slow(f)):
            allowed.update(range(f.lineno, (f.end_lineno or f.lineno) + 1))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "sleep" and not (node.lineno in allowed and "#" in lines[node.lineno - 1]):
                bad.append(node.lineno)
    return bad


def test_fmt_skip_only_on_data_tables_that_say_so() -> None:
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in _python_files(*TREES) for n in fmt_skips_without_a_table(p)]
    assert not bad, f"fmt-skip outside a commented data table: {bad}"


def test_no_sleep_in_tests_but_a_slow_one_that_says_why() -> None:
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in _python_files("tests") for n in sleeps_outside_slow_tests(p)]
    assert not bad, f"sleep in a test (inject a clock, or poll with tests/support/wait.until): {bad}"


def test_the_rules_catch_what_they_name(tmp_path: Path) -> None:
    table = tmp_path / "table.py"
    table.write_text(
        f"# A data table, one row a line.\nX = [\n    1, 2,\n]  {MARKER}\n\nY = [1,\n 2]  {MARKER}\n"
    )
    assert fmt_skips_without_a_table(table) == [7]
    naps = tmp_path / "test_naps.py"
    naps.write_text(
        "import time\nimport pytest\n\n"
        "def test_fast():\n    time.sleep(1)  # a reason does not make it slow\n\n"
        "@pytest.mark.slow\ndef test_slow():\n    time.sleep(1)  # the server's own 1 s tick\n\n"
        "@pytest.mark.slow\ndef test_silent():\n    time.sleep(1)\n"
    )
    assert sleeps_outside_slow_tests(naps) == [5, 13]
