"""Label matchers (Alertmanager syntax), durations and timestamps for silences and routes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from kvdoctor.config.durations import EXAMPLES, duration_seconds
from kvdoctor.config.yamlpos import KeyPath, Problems

LABELS = ("target", "model_name", "finding", "severity", "bottleneck")
_MATCHER = re.compile(r'^\s*([a-z_]+)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|(\S*))\s*$')


@dataclass(frozen=True)
class Matcher:
    """One label matcher: label, op (=, !=, =~, !~) and value; regexes are fully anchored."""

    label: str
    op: str
    value: str

    def matches(self, labels: dict[str, str]) -> bool:
        """True when the label value satisfies the matcher (a missing label is the empty string)."""
        got = labels.get(self.label, "")
        if self.op in ("=~", "!~"):
            hit = re.fullmatch(self.value, got) is not None
            return hit if self.op == "=~" else not hit
        return (got == self.value) if self.op == "=" else (got != self.value)


def parse_duration(v: Any, path: KeyPath, problems: Problems) -> float | None:
    """Seconds from a number or a duration (kvdoctor.config.durations: '90s', '1h30m', '500ms'); records an error."""
    try:
        out = duration_seconds(v)
    except ValueError:
        problems.at(path, f"must be a duration {EXAMPLES}")
        return None
    if out < 0:
        problems.at(path, "must not be negative")
        return None
    return out


def parse_time(v: Any, path: KeyPath, problems: Problems) -> float | None:
    """Unix seconds from a number, an RFC 3339 string or a YAML timestamp; records an error."""
    if isinstance(v, bool):
        problems.at(path, "must be an RFC 3339 time or unix seconds")
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, datetime):
        return (v if v.tzinfo else v.replace(tzinfo=UTC)).timestamp()
    if isinstance(v, date):
        return datetime(v.year, v.month, v.day, tzinfo=UTC).timestamp()
    if isinstance(v, str):
        try:
            dt = datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    problems.at(path, "must be an RFC 3339 time or unix seconds")
    return None


def _check(label: str, op: str, value: str, path: KeyPath, problems: Problems) -> Matcher | None:
    if label not in LABELS:
        problems.at(path, f"unknown label {label!r} (expected one of {', '.join(LABELS)})")
        return None
    if op in ("=~", "!~"):
        try:
            re.compile(value)
        except re.error as e:
            problems.at(path, f"invalid regex: {e}")
            return None
    return Matcher(label, op, value)


def parse_matchers(v: Any, path: KeyPath, problems: Problems) -> tuple[Matcher, ...]:
    """Matchers from a list of strings ('target=~"vllm-.*"') or a mapping {label: value} (exact match)."""
    out: list[Matcher] = []
    if isinstance(v, dict):
        for label, value in v.items():
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                problems.at((*path, str(label)), "must be a string")
                continue
            m = _check(str(label), "=", str(value), (*path, str(label)), problems)
            if m:
                out.append(m)
        return tuple(out)
    if not isinstance(v, list):
        problems.at(path, "must be a list of matchers like 'severity=\"critical\"' or a mapping")
        return ()
    for i, item in enumerate(v):
        p = (*path, i)
        parsed = _MATCHER.match(item) if isinstance(item, str) else None
        if not parsed:
            problems.at(p, "must be a matcher like 'target=~\"vllm-.*\"'")
            continue
        label, op, quoted, bare = parsed.groups()
        value = bytes(quoted, "utf-8").decode("unicode_escape") if quoted is not None else bare
        m = _check(label, op, value, p, problems)
        if m:
            out.append(m)
    return tuple(out)


def all_match(matchers: tuple[Matcher, ...], labels: dict[str, str]) -> bool:
    """True when every matcher matches (an empty matcher list matches everything)."""
    return all(m.matches(labels) for m in matchers)
