"""The checks tools/sweep_recordings.py applies to each command's result: what a user should never see."""

from __future__ import annotations

import json
import math
import re
from typing import Any

# JSON keys whose values may rightly be negative: margins to an SLO, growth rates, signed changes, clock times
SIGNED = re.compile(r"margin|growth|delta|diff|offset|slope|trend|(^|\.)t$|_t$|since|start|end|first|last")
WHATIF_CPU_S_PER_5MIN = 2.0
PLAN_S = 10.0


def status(r: dict[str, Any]) -> str:
    """ok, error (a clean exit 2 with a message) or traceback (anything uncaught, or no message)."""
    if r["traceback"]:
        return "traceback"
    if r["code"] in (0, 1):
        return "ok"
    return "error" if r["code"] == 2 and r["stderr"].strip() else "traceback"


def load_json(r: dict[str, Any]) -> Any:
    """The --json output, NaN and Infinity kept as floats so they can be flagged."""
    try:
        return json.loads(r["stdout"])
    except ValueError:
        return None


def _walk(v: Any, path: str = "") -> Any:
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _walk(x, f"{path}.{k}")
    elif isinstance(v, list):
        for j, x in enumerate(v):
            yield from _walk(x, f"{path}[{j}]")
    else:
        yield path, v


def json_flags(data: Any) -> list[str]:
    """NaN, inf and negative numbers where no negative makes sense."""
    out = []
    for path, v in _walk(data):
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue
        if not math.isfinite(v):
            out.append(f"{path}={v}")
        elif v < 0 and not SIGNED.search(re.sub(r"\[\d+\]", "", path)):
            out.append(f"{path}={v:g}")
    return (
        [f"non-finite or negative in JSON: {', '.join(out[:4])}{' …' if len(out) > 4 else ''}"] if out else []
    )


def _load(argv: list[str]) -> float:
    """The load factor a `--set load=xF` asks for (1 without one)."""
    sets = [a.split("=", 1)[1] for a in argv if a.startswith("load=")]
    return float(sets[-1].lstrip("x")) if sets else 1.0


def _whatif_absurd(d: dict[str, Any], load: float) -> list[str]:
    out = []
    w, p = d.get("workload") or {}, d.get("predicted") or {}
    tok = p.get("generation_tokens_per_s")
    if w.get("kind") == "open" and tok and w.get("requests_per_s") and w.get("output_tokens_mean"):
        offered = load * w["requests_per_s"] * w["output_tokens_mean"]
        if tok > 1.3 * offered:
            out.append(f"predicted {tok:.4g} tok/s above the {offered:.4g} the open load offers")
    return out


def unchanged_misses(d: dict[str, Any]) -> list[str]:
    """Where the unchanged prediction of a whatif --json misses what its window measured (whatif's own words)."""
    return [f"not reproduced: {m}" for m in d.get("not_reproduced") or []]


def _plan_absurd(d: dict[str, Any]) -> list[str]:
    return [f"{p}={v:g}" for p, v in _walk(d) if "headroom" in p and isinstance(v, int | float) and v < 0]


def _window_s(text: str) -> float:
    m = re.search(r"window (-?[\d.]+)-(-?[\d.]+) s", text)
    return float(m.group(2)) - float(m.group(1)) if m else 300.0


def _text_class(kind: str, text: str) -> Any:
    """The verdict the text rendering shows, in the JSON's terms."""
    if kind == "whatif":
        m = re.search(r"^Class\s+(\S+)\s+(\S+)\s+(\S+)", text, re.M)
        return m.groups() if m else None
    if kind == "plan":
        m = re.search(r"^(plan|INFEASIBLE)\b.*?(\d+) replica", text, re.M)
        return (m.group(1) == "plan", int(m.group(2))) if m else None
    if kind == "replay":
        last: dict[str, str] = {}
        for m in re.finditer(
            r"^\d\d:\d\d:\d\d \+\S+\s+(.+?) · .+?  (\w+)(?: \(was \w+\))?  findings", text, re.M
        ):
            last[m.group(1)] = m.group(2)
        return last
    return None


def _json_class(kind: str, d: Any) -> Any:
    if kind == "whatif":
        return tuple(
            str((d.get(k) or {}).get("bottleneck")) for k in ("measured", "predicted_unchanged", "predicted")
        )
    if kind == "plan":
        return (bool(d.get("feasible")), int((d.get("chosen") or {}).get("replicas", -1)))
    if kind == "replay":
        last: dict[str, str] = {}
        for e in d.get("timeline", []):
            last[e.get("target")] = e.get("bottleneck")
        return last
    return None


def flags(kind: str, r: dict[str, Any], data: Any, text: dict[str, Any], timeout: float) -> list[str]:
    """Everything wrong with one run beyond its exit status."""
    out: list[str] = []
    if r["form"] == "json" and r["code"] in (0, 1) and not r["traceback"]:
        if data is None:
            out.append("--json output is not one JSON document")
        else:
            out += json_flags(data)
            if not r.get("aside"):
                out += (
                    _whatif_absurd(data, _load(r["argv"]))
                    if kind == "whatif"
                    else _plan_absurd(data)
                    if kind == "plan"
                    else []
                )
            if text["code"] != r["code"]:
                out.append(f"exit {r['code']} with --json, {text['code']} without")
            elif text["code"] in (0, 1) and _text_class(kind, text["stdout"]) != _json_class(kind, data):
                shown = _text_class(kind, text["stdout"])
                out.append(f"verdict differs: text {shown}, json {_json_class(kind, data)}")
    if r["form"] == "text" and kind == "whatif" and r["code"] == 0:
        budget = WHATIF_CPU_S_PER_5MIN * max(1.0, _window_s(r["stdout"]) / 300)
        if r["cpu_s"] > budget:
            out.append(f"whatif took {r['cpu_s']:.1f} s of CPU (budget {budget:.1f} s)")
    if r["form"] == "text" and kind == "plan" and r["cpu_s"] > PLAN_S:
        out.append(f"plan took {r['cpu_s']:.1f} s of CPU (over {PLAN_S:g} s)")
    if status(r) == "error" and re.search(
        r"Traceback|Error\b.*line \d+|object has no attribute", r["stderr"]
    ):
        out.append("error message reads like a Python internal")
    return out


def line(r: dict[str, Any]) -> str:
    """One line: status, CPU and wall seconds, the command, then the message, traceback's last line or flags."""
    st = status(r)
    what = ""
    if st == "traceback":
        what = (r["traceback"] or r["stderr"]).strip().splitlines()[-1:] or [
            f"exit {r['code']} with no message"
        ]
        what = what[0]
    elif st == "error":
        what = " | ".join(r["stderr"].strip().splitlines()[:2])
    flag = ("  FLAG: " + "; ".join(r["flags"])) if r["flags"] else ""
    return f"{st:9s} {r['cpu_s']:6.2f}s cpu {r['wall_s']:6.2f}s  {r['label']:36s} {what[:200]}{flag}"
