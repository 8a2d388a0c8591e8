"""YAML loading that remembers the line of every key, so errors can name it; YAML syntax errors at the line to fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml


@dataclass
class Located:
    """A parsed document and the 1-based line of each key path."""

    value: Any
    lines: dict[tuple[Any, ...], int]
    file: str

    def where(self, *path: Any) -> str:
        """`file:line` of the deepest known prefix of path."""
        for n in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:n]))
            if line:
                return f"{self.file}:{line}"
        return self.file


KeyPath = tuple[str | int, ...]
# Where a value came from: its key path in the document, or (a str) the environment variable that set it.
Where = KeyPath | str


def dotted(path: KeyPath) -> str:
    """The key path as a user writes it: `notify.silences[0].ends`."""
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


@dataclass
class Problems:
    """Every problem found while validating one document, each placed where the user wrote the value.

    The one located-validation helper the loaders share: `at(path, message)` gives `file:line: key.path: message`
    (the line of the deepest key of path the document has), an environment variable gives `environment: VAR: …`.
    With no document (a section validated on its own) a problem is `key.path: message` or `VAR: message`.
    """

    doc: Located | None
    lines: list[str] = field(default_factory=list)

    def at(self, where: Where, message: str) -> None:
        """Record message about the value at where (a key path, or the name of the environment variable that set it)."""
        what = where if isinstance(where, str) else dotted(where)
        if self.doc is None:
            self.lines.append(f"{what}: {message}")
        elif isinstance(where, str):
            self.lines.append(f"environment: {what}: {message}")
        else:
            self.lines.append(f"{self.doc.where(*where)}: {what}: {message}")

    def __bool__(self) -> bool:
        return bool(self.lines)


def locate(text: str, file: str) -> Located:
    """Parse YAML text, recording the line of every mapping key and sequence item."""
    lines: dict[tuple[Any, ...], int] = {}
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    loader = yaml.SafeLoader("")
    if node is None:
        return Located({}, lines, file)

    def walk(n: yaml.Node, path: tuple[Any, ...]) -> Any:
        lines.setdefault(path, n.start_mark.line + 1)
        if isinstance(n, yaml.MappingNode):
            out = {}
            for k, v in n.value:
                key = loader.construct_object(k) if isinstance(k, yaml.ScalarNode) else str(k)
                lines[(*path, key)] = k.start_mark.line + 1
                out[key] = walk(v, (*path, key))
            return out
        if isinstance(n, yaml.SequenceNode):
            return [walk(v, (*path, i)) for i, v in enumerate(n.value)]
        return loader.construct_object(n, deep=True)

    return Located(walk(node, ()), lines, file)


# An unclosed flow collection or quoted scalar is only noticed lines later (often at the end of the file);
# the line to fix is the one that opened it.
_OPENED = ("flow sequence", "flow mapping", "quoted scalar")


def broken_line(exc: yaml.YAMLError) -> tuple[int | None, str]:
    """The 1-based line to fix (None when PyYAML gives none) and what is wrong there."""
    problem = str(getattr(exc, "problem", None) or exc)
    context = str(getattr(exc, "context", None) or "")
    opened, noticed = getattr(exc, "context_mark", None), getattr(exc, "problem_mark", None)
    if opened is not None and any(k in context for k in _OPENED):
        what = context.removeprefix("while parsing ").removeprefix("while scanning ")
        where = f" (noticed at line {noticed.line + 1})" if noticed is not None else ""
        return opened.line + 1, f"{what} not closed: {problem}{where}"
    return (noticed.line + 1 if noticed is not None else None), problem


def yaml_error(file: str, exc: yaml.YAMLError) -> str:
    """`file:line: invalid YAML: …` for a PyYAML error, the line being the one to fix."""
    line, what = broken_line(exc)
    return f"{file}{f':{line}' if line else ''}: invalid YAML: {what}"
