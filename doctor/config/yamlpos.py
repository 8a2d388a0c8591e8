"""YAML loading that remembers the line of every key, so errors can name it."""

from __future__ import annotations

from dataclasses import dataclass
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
