"""Plain-text rendering of diagnoses for terminals: reports, and timelines of state changes."""

from __future__ import annotations

import time

from kvdoctor import fmt
from kvdoctor.signals import SIGNALS, evidence_for
from kvdoctor.verdicts import Diagnosis, Finding

HEADLINE = {
    "kv_cache": "KV-cache bound: the cache is full, requests queue and get preempted",
    "batch_cap": "Batch-capped: running is pinned at --max-num-seqs while requests wait and KV has room",
    "compute": "Compute bound: tokens are slow while KV has room and the batch is below its cap",
    "healthy": "Healthy: no limit hit",
    "idle": "Idle: nothing running or waiting",
    "unknown": "Unknown: not enough data yet (or the target is down)",
}


def _summary() -> tuple[str, ...]:
    return tuple(k for k, s in SIGNALS.items() if s.summary)


def evidence_line(evidence: dict[str, float | str], keys: tuple[str, ...] | None = None) -> str:
    """`KV cache usage 93 % · Running 6 · …` for the given keys (or all, known keys first)."""
    order = keys or tuple(k for k in SIGNALS if k in evidence)
    parts = [f"{fmt.label_of(k)} {fmt.value(k, evidence[k])}" for k in order if k in evidence]
    return " · ".join(parts)


def _finding_lines(f: Finding, indent: str) -> list[str]:
    lines = [f"{indent}- {f.name} ({f.severity}): {f.summary}"]
    if f.description:
        lines.append(f"{indent}  {f.description}")
    ev = evidence_line(f.evidence, evidence_for(f.name) or tuple(f.evidence))
    if ev:
        lines.append(f"{indent}  evidence: {ev}")
    return lines


def advice_lines(d: Diagnosis, indent: str = "    ") -> list[str]:
    """The advice of the diagnosis, one flag per line, with where its numbers come from."""
    out = []
    for a in d.advice:
        src = f"  [{a.source}]" if a.source else ""
        flag = f"{a.flag}: " if a.flag and not a.text.startswith("`") else ""
        out.append(f"{indent}* {flag}{a.text}{src}")
        if a.effect is not None:
            out.append(f"{indent}  predicted: {a.effect.summary()}")
    return out


def report(d: Diagnosis) -> str:
    """A full report a person can act on."""
    head = f"{d.target} · {d.model_name or '(no model)'}: {d.verdict.upper()}"
    lines = [head, "  " + HEADLINE.get(d.verdict, d.verdict)]
    ev = evidence_line(d.evidence, _summary())
    if ev:
        lines.append(f"  evidence: {ev}")
    if d.findings:
        lines.append("  findings:")
        for f in d.findings:
            lines += _finding_lines(f, "    ")
    if d.advice:
        lines.append("  what to change:")
        lines += advice_lines(d)
    return "\n".join(lines)


def stamp(t: float, start: float | None = None) -> str:
    """`12:04:05` (UTC), plus `+75s` from start when given."""
    clock = time.strftime("%H:%M:%S", time.gmtime(t))
    return f"{clock} +{t - start:.0f}s" if start is not None else clock


def change_line(d: Diagnosis, start: float | None, previous: str | None) -> str:
    """One timeline entry for a change of class or findings."""
    names = ", ".join(f.name for f in d.findings) or "none"
    was = f" (was {previous})" if previous and previous != d.verdict else ""
    head = f"{stamp(d.t, start)}  {d.target} · {d.model_name or '-'}  {d.verdict}{was}  findings: {names}"
    ev = evidence_line(d.evidence, _summary())
    return head + (f"\n    evidence: {ev}" if ev else "")
