"""The subset of Prometheus' Go templates used in rule labels and annotations, checked at load time."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from kvdoctor.errors import InputError

_ACTION_RE = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}", re.S)
_TERM_RE = re.compile(
    r'^(\$labels\.[a-zA-Z_][a-zA-Z0-9_]*|\$externalLabels\.[a-zA-Z_][a-zA-Z0-9_]*|\$value|"[^"]*")$'
)
_PRINTF_RE = re.compile(r'^printf\s+"([^"]*)"\s+(\S+)$')


class TemplateError(InputError):
    """A template using something outside the supported subset."""


def _humanize(v: float) -> str:
    if v == 0 or math.isnan(v) or math.isinf(v):
        return f"{v:.4g}"
    if abs(v) >= 1:
        for prefix in ("", "k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(v) < 1000:
                return f"{v:.4g}{prefix}"
            v /= 1000
        return f"{v:.4g}Y"
    for prefix in ("", "m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            return f"{v:.4g}{prefix}"
        v *= 1000
    return f"{v:.4g}y"


def _humanize_duration(v: float) -> str:
    if math.isnan(v) or math.isinf(v):
        return f"{v:.4g}"
    if abs(v) < 1:
        return _humanize(v) + "s"
    sign = "-" if v < 0 else ""
    v = abs(v)
    d, rem = divmod(int(v), 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    parts = [f"{d}d" if d else "", f"{h}h" if h else "", f"{m}m" if m else "", f"{s}s"]
    return sign + "".join(p for p in parts if p)


FUNCS: dict[str, Callable[[float], str]] = {
    "humanize": _humanize,
    "humanizePercentage": lambda v: f"{_humanize(v * 100)}%",
    "humanizeDuration": _humanize_duration,
    "humanize1024": lambda v: f"{v:.4g}",
}


def _parse(action: str) -> tuple[str, list[str], str | None]:
    parts = [p.strip() for p in action.split("|")]
    head, funcs = parts[0], parts[1:]
    fmt = None
    pm = _PRINTF_RE.match(head)
    if pm:
        fmt, head = pm.group(1), pm.group(2)
    if not _TERM_RE.match(head):
        raise TemplateError(f"unsupported template action {{{{ {action} }}}}")
    for f in funcs:
        if f not in FUNCS:
            raise TemplateError(f"unsupported template function {f!r}")
    return head, funcs, fmt


def check_template(text: str) -> None:
    """Raise TemplateError if text uses anything outside the supported subset."""
    for m in _ACTION_RE.finditer(text):
        _parse(m.group(1))


def _go_printf(fmt: str, v: float | str) -> str:
    try:
        return re.sub(r"%v", "%s", fmt) % (v,)
    except (TypeError, ValueError):
        return f"%!({fmt}={v})"


def expand(text: str, labels: dict[str, str], value: float, external: dict[str, str] | None = None) -> str:
    """Expand a template with $labels, $value and $externalLabels."""

    def one(m: re.Match[str]) -> str:
        head, funcs, fmt = _parse(m.group(1))
        if head == "$value":
            val: float | str = value
        elif head.startswith("$labels."):
            val = labels.get(head[8:], "")
        elif head.startswith("$externalLabels."):
            val = (external or {}).get(head[16:], "")
        else:
            val = head[1:-1]
        if fmt is not None:
            val = _go_printf(fmt, val)
        for f in funcs:
            try:
                val = FUNCS[f](float(val))
            except ValueError:
                val = str(val)
        if isinstance(val, float):
            return _go_float(val)
        return str(val)

    return _ACTION_RE.sub(one, text)


def _go_float(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e21:
        return str(int(v))
    text = repr(v)
    if "e" in text:
        mant, exp = text.split("e")
        return f"{mant}e{'+' if not exp.startswith('-') else '-'}{abs(int(exp)):02d}"
    return text
