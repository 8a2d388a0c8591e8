"""The runbook page (/runbook): one section per finding, from the loaded rule pack and kvdoctor's own findings."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from kvdoctor import __version__
from kvdoctor.rules.loader import Rule, RuleGroup
from kvdoctor.signals import FINDINGS, SIGNALS, FindingKind, evidence_for

_LABEL = re.compile(r"\{\{-?\s*\$labels\.([A-Za-z_][A-Za-z0-9_]*)\s*-?\}\}")
_VALUE = re.compile(r"\{\{-?\s*\$value\b[^}]*\}\}")
_OTHER = re.compile(r"\{\{.*?\}\}")
_CODE = re.compile(r"`([^`]+)`")
QUANTIFIED = ("kv_cache", "batch_cap", "compute")  # limits whose advice kvdoctor computes per target


@dataclass(frozen=True)
class FindingInfo:
    """One finding as the runbook shows it."""

    name: str
    anchor: str  # the section it links to (several findings may share one, e.g. spec_decode)
    severity: str
    summary: str
    description: str
    advice: str
    evidence: tuple[str, ...]
    bottleneck: str = ""
    rules: tuple[Rule, ...] = ()  # the pack's alerting rules raising it; empty for kvdoctor's own
    kvdoctor: FindingKind | None = None  # set when kvdoctor's own code raises it too


def catalogue(groups: list[RuleGroup]) -> list[FindingInfo]:
    """Every finding the classifier can emit with these rules: the pack's alerts in pack order, then kvdoctor's."""
    rules: dict[str, list[Rule]] = {}
    for g in groups:
        for r in g.rules:
            if r.kind == "alert" and r.labels.get("finding"):
                rules.setdefault(r.labels["finding"], []).append(r)
    own = {name: k for name, k in FINDINGS.items() if k.meaning}
    out = []
    for name, rs in rules.items():
        a, labels = rs[0].annotations, rs[0].labels
        anchor = urlsplit(a.get("runbook_url", "")).fragment or name
        out.append(
            FindingInfo(
                name,
                anchor,
                labels.get("severity", "warning"),
                a.get("summary", name),
                a.get("description", ""),
                a.get("advice", ""),
                evidence_for(name),
                labels.get("bottleneck", ""),
                tuple(rs),
                own.get(name),
            )
        )
    for name, k in own.items():
        if name not in rules:
            out.append(FindingInfo(name, name, k.severity, "", k.meaning, k.advice, k.evidence, kvdoctor=k))
    return out


def render(groups: list[RuleGroup]) -> str:
    """The runbook as a standalone HTML page (no script, styles from static/runbook.css)."""
    found = catalogue(groups)
    sections: dict[str, list[FindingInfo]] = {}
    for f in found:
        sections.setdefault(f.anchor, []).append(f)
    recorded = {r.name: r for g in groups for r in g.rules if r.kind == "record"}
    files = sorted({Path(g.file).name for g in groups})
    alerts = sum(len(f.rules) for f in found)
    toc = "".join(
        f'<li><a href="#{_e(anchor)}">{_e(anchor)}</a>{_names(fs, anchor)}</li>'
        for anchor, fs in sections.items()
    )
    body = "".join(_section(anchor, fs, recorded) for anchor, fs in sections.items())
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>kvdoctor runbook</title>"
        '<link rel="icon" href="static/favicon.svg" type="image/svg+xml">'
        '<link rel="stylesheet" href="static/runbook.css"></head><body>'
        '<header><h1>kvdoctor runbook</h1><p class="lead">What each finding means, what decides it and what to '
        f"change. Generated from the rule pack loaded now ({alerts} alerting rules in {_e(', '.join(files))}) and "
        f'the checks kvdoctor makes itself · kvdoctor {_e(__version__)} · <a href="./">status page</a></p>'
        f'<nav><h2>Findings</h2><ul class="toc">{toc}</ul></nav></header><main>{body}</main></body></html>\n'
    )


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _prose(text: str) -> str:
    """Escaped text with `code` spans and the rule templates' placeholders shown as ‹label›."""
    text = _VALUE.sub("‹value›", _LABEL.sub(r"‹\1›", text))
    return _CODE.sub(r"<code>\1</code>", _e(_OTHER.sub("…", text)))


def _names(fs: list[FindingInfo], anchor: str) -> str:
    inner = [f for f in fs if f.name != anchor]
    if not inner:
        return ""
    return "<ul>" + "".join(f'<li><a href="#{_e(f.name)}">{_e(f.name)}</a></li>' for f in inner) + "</ul>"


def _section(anchor: str, fs: list[FindingInfo], recorded: dict[str, Rule]) -> str:
    if len(fs) == 1 and fs[0].name == anchor:
        return f'<section id="{_e(anchor)}" class="finding sev-{_e(fs[0].severity)}">{_body(fs[0], recorded, "h2")}</section>'
    inner = "".join(
        f'<article id="{_e(f.name)}" class="finding sev-{_e(f.severity)}">{_body(f, recorded, "h3")}</article>'
        for f in fs
        if f.name != anchor
    )
    own = next((f for f in fs if f.name == anchor), None)
    head = _body(own, recorded, "h2") if own else f"<h2>{_e(anchor)}</h2>"
    return f'<section id="{_e(anchor)}" class="group">{head}{inner}</section>'


def _body(f: FindingInfo, recorded: dict[str, Rule], h: str) -> str:
    kind = f"limit <code>{_e(f.bottleneck)}</code> · " if f.bottleneck else ""
    by = (
        " · ".join(f"rule <code>{_e(r.name)}</code> ({_e(Path(r.file).name)}:{r.line})" for r in f.rules)
        if f.rules
        else "kvdoctor's own check"
    )
    out = [
        f'<{h}>{_e(f.name)}</{h}><p class="meta"><span class="sev">{_e(f.severity)}</span> · {kind}raised by {by}</p>'
    ]
    if f.summary:
        out.append(f'<p class="summary">{_prose(f.summary)}</p>')
    if f.description:
        out.append(f"<p>{_prose(f.description)}</p>")
    if f.kvdoctor and f.rules:
        out.append(f"<p>kvdoctor also raises it from its own scrapes: {_prose(f.kvdoctor.meaning)}</p>")
    if f.advice:
        out.append(f"<h4>What to change</h4><p>{_prose(f.advice)}</p>")
    if f.bottleneck in QUANTIFIED:
        out.append(
            "<p>kvdoctor's own alerts (status page, API, Slack, Alertmanager) carry this advice with numbers for "
            "the target: from its <code>vllm:cache_config_info</code>, the configured model and GPU, and the "
            "signals below.</p>"
        )
    for r in f.rules:
        timing = []
        if r.for_s:
            timing.append(f"must hold for {r.for_s:g} s before it fires")
        if r.keep_firing_for_s:
            timing.append(f"keeps firing {r.keep_firing_for_s:g} s after it stops holding")
        out.append(
            f"<h4>What decides it</h4><pre><code>{_e(r.expr.strip())}</code></pre>"
            + (f"<p>{_e('; '.join(timing))}.</p>" if timing else "")
        )
    if f.evidence:
        rows = "".join(
            _evidence_row(key, SIGNALS[key].rule if key in SIGNALS else "", recorded) for key in f.evidence
        )
        out.append(f'<h4>Evidence</h4><table class="evidence"><tbody>{rows}</tbody></table>')
    return "".join(out)


def _evidence_row(key: str, rule: str, recorded: dict[str, Rule]) -> str:
    r = recorded.get(rule)
    where = f"<code>{_e(rule)}</code>" if rule else "kvdoctor's scrape"
    if r is not None:
        where = f"<details><summary><code>{_e(rule)}</code></summary><pre><code>{_e(r.expr.strip())}</code></pre></details>"
    return f"<tr><th><code>{_e(key)}</code></th><td>{where}</td></tr>"
