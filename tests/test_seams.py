"""Values, not dicts, cross a package boundary (#20): a public name typed with an untyped dict fails here when
another package reaches it.

Untyped: `dict[str, Any]`, `Mapping[str, Any]` (and `Dict`, `MutableMapping`), a bare `dict`, or a return of
bare `Any`. A package is `kvdoctor/<pkg>/` or a top-level module. JSON documents at the edges (outside data on its
way in, JSON on its way out) say so with `kvdoctor.jsondoc.JsonObject`/`JsonValue`, which this check accepts.

Reached from another package: a function or module constant imported there, or named through its module
(`from kvdoctor.a import b`, then `b.name`); a class's `__init__` called there with the class imported; a method
or attribute named there (`.name`) when that module imports the class, or when no other class under the package
has a member of that name and it is not a builtin container's method.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

PACKAGE = Path(__file__).resolve().parents[1] / "kvdoctor"
MAPPINGS = {"dict", "Dict", "Mapping", "MutableMapping"}
CONTAINER_METHODS = {n for t in (dict, list, set, str, tuple) for n in dir(t) if not n.startswith("_")}


class Seam(NamedTuple):
    """One public name typed with an untyped dict."""

    package: str
    module: str
    owner: str | None  # its class, for a method or attribute
    name: str
    where: str  # file:line

    def __str__(self) -> str:
        return f"{self.where} {self.owner + '.' if self.owner else ''}{self.name}"


def untyped(ann: ast.expr | None, returns: bool = False) -> bool:
    """Whether an annotation mentions an untyped dict (or, as a return, is bare Any)."""
    if ann is None:
        return False
    if returns and isinstance(ann, ast.Name) and ann.id == "Any":
        return True
    subscripted = set()
    for n in ast.walk(ann):
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in MAPPINGS:
            subscripted.add(id(n.value))
            args = n.slice.elts if isinstance(n.slice, ast.Tuple) else []
            if len(args) == 2 and isinstance(args[1], ast.Name) and args[1].id == "Any":
                return True
    return any(
        isinstance(n, ast.Name) and n.id in {"dict", "Dict"} and id(n) not in subscripted
        for n in ast.walk(ann)
    )


def _function_untyped(f: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    a = f.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]
    return any(untyped(p.annotation) for p in params) or untyped(f.returns, returns=True)


def _public(name: str) -> bool:
    return not name.startswith("_") or name == "__init__"


def _members(cls: ast.ClassDef) -> Iterator[tuple[str, ast.AST, bool]]:
    """(name, node, untyped) of a class's methods and annotated attributes (fields and `self.x: T`)."""
    for m in cls.body:
        if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef):
            yield m.name, m, _function_untyped(m)
            if m.name == "__init__":
                for s in ast.walk(m):
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Attribute):
                        yield s.target.attr, s, untyped(s.annotation)
        elif isinstance(m, ast.AnnAssign) and isinstance(m.target, ast.Name):
            yield m.target.id, m, untyped(m.annotation)


class Uses(NamedTuple):
    """What one module names: its package, its imports, attributes and calls, each with their lines."""

    package: str
    imports: dict[str, list[tuple[str, int]]]  # imported name → (from module, line)
    attributes: dict[str, list[int]]  # `.name` → lines
    calls: dict[str, list[int]]  # name(…) or x.name(…) → lines


class Tree(NamedTuple):
    """What the check reads of a package: its untyped public names and who names what."""

    seams: list[Seam]
    member_owners: dict[str, set[str]]  # member name → classes that define one
    uses: dict[str, Uses]  # file → what it names


def _uses(package: str, tree: ast.Module) -> Uses:
    imports: dict[str, list[tuple[str, int]]] = defaultdict(list)
    attributes: dict[str, list[int]] = defaultdict(list)
    calls: dict[str, list[int]] = defaultdict(list)
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            for a in n.names:
                imports[a.name].append((n.module or "", n.lineno))
        elif isinstance(n, ast.Attribute):
            attributes[n.attr].append(n.lineno)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name | ast.Attribute):
            calls[n.func.id if isinstance(n.func, ast.Name) else n.func.attr].append(n.lineno)
    return Uses(package, imports, attributes, calls)


def read(root: Path) -> Tree:
    """Every module under root, parsed once."""
    seams: list[Seam] = []
    owners: dict[str, set[str]] = defaultdict(set)
    uses: dict[str, Uses] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        package = path.relative_to(root).parts[0].removesuffix(".py")
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        uses[str(rel)] = _uses(package, tree)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _public(node.name):
                if _function_untyped(node):
                    seams.append(Seam(package, module, None, node.name, f"{rel}:{node.lineno}"))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if _public(node.target.id) and untyped(node.annotation):
                    seams.append(Seam(package, module, None, node.target.id, f"{rel}:{node.lineno}"))
            elif isinstance(node, ast.ClassDef):
                for name, m, bad in _members(node):
                    owners[name].add(f"{module}.{node.name}")
                    if bad and _public(node.name) and _public(name):
                        seams.append(
                            Seam(package, module, node.name, name, f"{rel}:{getattr(m, 'lineno', 0)}")
                        )
    return Tree(seams, owners, uses)


def reached(seam: Seam, tree: Tree) -> list[str]:
    """file:line of each place another package reaches seam."""
    out = []
    unique = len(tree.member_owners[seam.name]) == 1 and seam.name not in CONTAINER_METHODS
    for where, uses in tree.uses.items():
        if uses.package == seam.package:
            continue
        wanted = seam.owner or seam.name
        # from kvdoctor.a.b import name, or from kvdoctor.a import name (a package re-exporting it)
        lines = [
            line
            for m, line in uses.imports.get(wanted, [])
            if seam.module == m or seam.module.startswith(m + ".")
        ]
        if seam.owner is None:
            out += [f"{where}:{line}" for line in lines]
            # from kvdoctor.a import b, then b.name
            parent, _, short = seam.module.rpartition(".")
            if any(m == parent for m, _ in uses.imports.get(short, [])):
                out += [f"{where}:{line}" for line in uses.attributes.get(seam.name, [])]
        elif seam.name == "__init__":
            out += [f"{where}:{line}" for line in uses.calls.get(seam.owner, [])] if lines else []
        elif lines or unique:
            out += [f"{where}:{line}" for line in uses.attributes.get(seam.name, [])]
    return out


def offenders(root: Path) -> list[str]:
    """Each untyped public name another package reaches, with the first places that reach it."""
    tree = read(root)
    out = []
    for seam in tree.seams:
        places = reached(seam, tree)
        if places:
            out.append(f"{seam} ← {', '.join(sorted(places)[:3])}{' …' if len(places) > 3 else ''}")
    return out


def test_no_untyped_dict_crosses_a_package_boundary() -> None:
    assert read(PACKAGE).uses, "no modules found: is PACKAGE right?"
    found = offenders(PACKAGE)
    assert not found, "untyped dicts crossing a package (a dataclass, or JsonObject for JSON):\n" + "\n".join(
        found
    )


def test_the_check_finds_each_kind_of_crossing(tmp_path: Path) -> None:
    root = tmp_path / "kvdoctor"
    (root / "low").mkdir(parents=True)
    (root / "high").mkdir()
    (root / "low" / "values.py").write_text(
        "from typing import Any\n"
        "from kvdoctor.jsondoc import JsonObject\n"
        "LIMITS: dict[str, Any] = {}\n"
        "def status() -> dict[str, Any]: ...\n"
        "def to_json() -> JsonObject: ...\n"
        "def _inside() -> dict[str, Any]: ...\n"
        "def raw(x: int) -> Any: ...\n"
        "def used_inside(m: dict) -> None: ...\n"
        "class Source:\n"
        "    snapshot: dict[str, Any]\n"
        "    def __init__(self, flags: dict[str, Any]) -> None: ...\n"
        "    def health(self) -> dict[str, Any]: ...\n"
        "    def get(self) -> dict[str, Any]: ...\n"
    )
    (root / "low" / "near.py").write_text("from kvdoctor.low.values import used_inside\n")
    (root / "low" / "tables.py").write_text(
        "from typing import Any\ndef rows() -> list[dict[str, Any]]: ...\n"
    )
    (root / "high" / "use.py").write_text(
        "from kvdoctor.low import tables\n"
        "from kvdoctor.low.values import LIMITS, status, to_json, raw, Source\n"
        "def f(s, other):\n"
        "    return Source({}), s.snapshot, other.health(), other.get(), tables.rows()\n"
    )
    found = {line.split(" ")[1] for line in offenders(root)}
    assert found == {
        "LIMITS",
        "status",
        "raw",
        "rows",
        "Source.snapshot",
        "Source.__init__",
        "Source.health",
        "Source.get",
    }
    (root / "high" / "use.py").write_text("def f(other):\n    return other.health(), other.get()\n")
    # health is Source's own name, so reaching it needs no import; get is every dict's, so it does
    assert {line.split(" ")[1] for line in offenders(root)} == {"Source.health"}
