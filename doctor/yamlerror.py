"""One wording for YAML syntax errors, pointing at the line that is broken rather than where the parser gave up."""

from __future__ import annotations

import yaml

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
