"""Load Prometheus rule files, validating every group and rule and reporting every error at once with file:line."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import promql_parser as pp
import yaml

from kvdoctor.config.durations import parse_duration
from kvdoctor.config.yamlpos import yaml_error
from kvdoctor.errors import ValidationError
from kvdoctor.promql.check import ExprError, check_expr
from kvdoctor.rules.templates import TemplateError, check_template

_METRIC_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_GROUP_KEYS = {"name", "interval", "rules", "limit", "query_offset"}
_RULE_KEYS = {"record", "alert", "expr", "for", "keep_firing_for", "labels", "annotations"}


@dataclass
class Rule:
    """One recording or alerting rule, parsed."""

    name: str
    kind: str  # "record" | "alert"
    expr: str
    ast: Any
    file: str
    line: int
    for_s: float = 0.0
    keep_firing_for_s: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass
class RuleGroup:
    """A rule group: evaluated in order, at its interval."""

    name: str
    file: str
    interval_s: float | None
    rules: list[Rule]


class RuleLoadError(ValidationError):
    """Every problem found in the rule files, one per line."""


def _line(node: yaml.Node | None) -> int:
    return node.start_mark.line + 1 if node is not None else 0


def _mapping(node: yaml.Node) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    return {k.value: (k, v) for k, v in node.value} if isinstance(node, yaml.MappingNode) else {}


def load_files(paths: list[Path], deadline: float | None = None) -> list[RuleGroup]:
    """Load every rule file; raise RuleLoadError listing every problem (nothing is half-loaded).

    deadline: a time.monotonic() after which loading stops with an error naming the file it had reached.
    """
    groups: list[RuleGroup] = []
    errors: list[str] = []
    seen_groups: set[tuple[str, str]] = set()
    for path in paths:
        if deadline is not None and time.monotonic() > deadline:
            raise RuleLoadError([f"{path}: not checked: loading the rule files ran past its deadline"])
        try:
            text = path.read_text(encoding="utf-8")
            root = yaml.compose(text)
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(f"{path}: cannot read: {exc}")
            continue
        except yaml.YAMLError as exc:
            errors.append(yaml_error(str(path), exc))
            continue
        groups += _load_root(path, root, errors, seen_groups, deadline)
    if errors:
        raise RuleLoadError(errors)
    return groups


def _load_root(
    path: Path, root: yaml.Node | None, errors: list[str], seen: set[tuple[str, str]], deadline: float | None
) -> list[RuleGroup]:
    top = _mapping(root) if root is not None else {}
    if root is None or "groups" not in top:
        errors.append(f"{path}:{_line(root) or 1}: a rule file needs a top-level `groups:` list")
        return []
    for key in top:
        if key != "groups":
            errors.append(f"{path}:{_line(top[key][0])}: unknown top-level key {key!r}")
    gnode = top["groups"][1]
    if not isinstance(gnode, yaml.SequenceNode):
        errors.append(f"{path}:{_line(gnode)}: `groups` must be a list")
        return []
    out = []
    for g in gnode.value:
        group = _load_group(path, g, errors, deadline)
        if group is None:
            continue
        if (str(path), group.name) in seen:
            errors.append(f"{path}:{_line(g)}: group {group.name!r} defined more than once")
        seen.add((str(path), group.name))
        out.append(group)
    return out


def _load_group(path: Path, node: yaml.Node, errors: list[str], deadline: float | None) -> RuleGroup | None:
    m = _mapping(node)
    where = f"{path}:{_line(node)}"
    if not m:
        errors.append(f"{where}: a group must be a mapping with `name` and `rules`")
        return None
    for key in m:
        if key not in _GROUP_KEYS:
            errors.append(f"{path}:{_line(m[key][0])}: group: unknown key {key!r}")
    name = m["name"][1].value if "name" in m and isinstance(m["name"][1], yaml.ScalarNode) else ""
    if not name:
        errors.append(f"{where}: group without a `name`")
    interval = None
    if "interval" in m:
        try:
            interval = parse_duration(m["interval"][1].value)
        except (ValueError, AttributeError):
            errors.append(f"{path}:{_line(m['interval'][1])}: group {name!r}: invalid interval")
    rules_node = m.get("rules", (None, None))[1]
    if not isinstance(rules_node, yaml.SequenceNode):
        errors.append(f"{where}: group {name!r}: `rules` must be a list")
        return None
    rules = []
    for rn in rules_node.value:
        if deadline is not None and time.monotonic() > deadline:
            errors.append(f"{path}:{_line(rn)}: not checked: loading the rule files ran past its deadline")
            return None
        rule = _load_rule(path, name, rn, errors)
        if rule is not None:
            rules.append(rule)
    return RuleGroup(name, str(path), interval, rules)


def _load_rule(path: Path, group: str, node: yaml.Node, errors: list[str]) -> Rule | None:
    m = _mapping(node)
    line = _line(node)
    where = f"{path}:{line}: group {group!r}"
    before = len(errors)
    for key in m:
        if key not in _RULE_KEYS:
            errors.append(f"{path}:{_line(m[key][0])}: group {group!r}: unknown rule key {key!r}")
    kinds = [k for k in ("record", "alert") if k in m]
    if len(kinds) != 1:
        errors.append(f"{where}: a rule needs exactly one of `record` or `alert`")
        return None
    kind = kinds[0]
    name = str(m[kind][1].value)
    where = f"{path}:{line}: rule {name!r}"
    if kind == "record" and not _METRIC_RE.match(name):
        errors.append(f"{where}: invalid recording rule name")
    if kind == "record" and any(k in m for k in ("for", "keep_firing_for", "annotations")):
        errors.append(f"{where}: `for`, `keep_firing_for` and `annotations` are for alerting rules only")
    expr = m["expr"][1].value if "expr" in m and isinstance(m["expr"][1], yaml.ScalarNode) else ""
    ast = None
    if not str(expr).strip():
        errors.append(f"{where}: missing `expr`")
    else:
        try:
            ast = check_expr(str(expr))
            if kind == "alert" and not _is_vector(ast):
                errors.append(f"{where}: an alert expression must return an instant vector")
        except ExprError as exc:
            errors.append(f"{where}: expr {exc}")
    durations = {}
    for key in ("for", "keep_firing_for"):
        if key in m:
            try:
                durations[key] = parse_duration(m[key][1].value)
            except (ValueError, AttributeError):
                errors.append(f"{where}: invalid `{key}` duration")
    labels = _string_map(m.get("labels"), where, "labels", errors)
    annotations = _string_map(m.get("annotations"), where, "annotations", errors)
    for k, v in {**labels, **annotations}.items():
        try:
            check_template(v)
        except TemplateError as exc:
            errors.append(f"{where}: template in {k!r}: {exc}")
    if len(errors) > before:
        return None
    return Rule(
        name,
        kind,
        str(expr),
        ast,
        str(path),
        line,
        durations.get("for", 0.0),
        durations.get("keep_firing_for", 0.0),
        labels,
        annotations,
    )


def _string_map(
    item: tuple[yaml.Node, yaml.Node] | None, where: str, what: str, errors: list[str]
) -> dict[str, str]:
    if item is None:
        return {}
    node = item[1]
    if not isinstance(node, yaml.MappingNode):
        errors.append(f"{where}: `{what}` must be a mapping")
        return {}
    out = {}
    for k, v in node.value:
        if what == "labels" and not _LABEL_RE.match(str(k.value)):
            errors.append(f"{where}: invalid label name {k.value!r}")
        if not isinstance(v, yaml.ScalarNode):
            errors.append(f"{where}: {what}.{k.value} must be a string")
            continue
        out[str(k.value)] = str(v.value)
    return out


def _is_vector(ast: Any) -> bool:
    return not isinstance(ast, pp.NumberLiteral | pp.StringLiteral)


def default_rule_dir() -> Path:
    """Where the shipped rule pack lives (`rules/` of a checkout links here)."""
    return Path(__file__).resolve().parent.parent / "rulepack"


def default_rule_files() -> list[Path]:
    """The rule pack shipped with kvdoctor."""
    return sorted(default_rule_dir().glob("*.yml"))


def rule_files(dirs_or_files: list[str] | None) -> list[Path]:
    """Expand directories into their *.yml/*.yaml files; None means the shipped pack."""
    if not dirs_or_files:
        return default_rule_files()
    out: list[Path] = []
    for item in dirs_or_files:
        p = Path(item)
        out += sorted([*p.glob("*.yml"), *p.glob("*.yaml")]) if p.is_dir() else [p]
    return out
