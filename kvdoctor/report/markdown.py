"""The report as Markdown, for a ticket or a review document."""

from __future__ import annotations

import re

from kvdoctor.report.document import Planned, Report
from kvdoctor.report.figures import Row
from kvdoctor.report.figures import dollars as _usd
from kvdoctor.report.figures import exact as _n
from kvdoctor.report.figures import percent as _pct
from kvdoctor.report.history import CLASSES
from kvdoctor.report.rows import Closeness

# ASCII punctuation that starts Markdown syntax (emphasis, links, tables, HTML): backslash-escaped in outside text
_MARKUP = re.compile(r"([\\`*_\[\]{}<>|#!~&])")


def md(text: object) -> str:
    """Outside text (target, model, explanations) as literal Markdown: one line, its markup characters escaped."""
    return _MARKUP.sub(r"\\\1", " ".join(str(text).split()))


def render_markdown(doc: Report) -> str:
    """The whole report: summary, recommendations, per-target tables, incidents, economics."""
    r, fl = doc.range, doc.fleet
    f, c = fl.summary, fl.costs
    rows = [Row(md(e.target), md(e.model_name), e.summary, e.costs, e.sizing) for e in doc.targets]
    rows.append(Row("**fleet**", "", f, c, fl.sizing))
    out = [
        "# kvdoctor capacity review",
        "",
        f"{r.start_iso} – {r.end_iso} ({r.hours:.1f} h), {fl.replicas} replica(s), source: {md(doc.source)}.",
        "",
        f"- Served **{f.requests:,}** requests, **{f.prompt_tokens:,}** prompt and "
        f"**{f.generation_tokens:,}** generation tokens ({_n(f.generation_tokens_per_s)} tokens/s mean, "
        f"peak hour {_n(f.peak_hour_generation_tokens_per_s)}, peak-to-mean {_n(f.peak_to_mean, 2)}).",
        f"- Idle {_pct(f.idle_share)} of {_n(c.gpu_hours)} GPU-hours; "
        f"{_pct(f.hours_without_traffic_share)} of the hours had no traffic.",
        f"- Replicas needed: {_n(fl.sizing.peak_replicas_needed)} at the peak hour, "
        f"{_n(fl.sizing.quiet_replicas_needed)} in quiet hours ({doc.headroom * 100:.0f} % headroom).",
    ]
    if c.cost_usd is not None:
        out.append(
            f"- Cost {_usd(c.cost_usd)} reserved ({_usd(c.cost_per_1m_generation_tokens_usd)} per 1M generation, "
            f"{_usd(c.cost_per_1m_prompt_tokens_usd)} per 1M prompt tokens); {_usd(c.cost_if_idle_unpaid_usd)} "
            f"without the idle hours; {_usd(c.cost_following_traffic_usd)} following the traffic."
        )
    out += ["", "## Recommendations", ""]
    out += [
        f"{i}. {md(rec.text)} *Evidence: {md(rec.evidence)}.*" for i, rec in enumerate(doc.recommendations, 1)
    ]
    out += [f"> {md(n)}" for n in doc.notes]
    out += [
        "",
        "## Time per class (hours)",
        "",
        "| target | model | " + " | ".join(CLASSES) + " | total | idle share |",
        "|---|---|" + "---:|" * (len(CLASSES) + 2),
    ]
    for e in rows:
        h = e.summary.hours
        out.append(
            f"| {e.target} | {e.model_name} | "
            + " | ".join(_n(h[c], 2) for c in CLASSES)
            + f" | {_n(h['total'], 2)} | {_pct(e.summary.idle_share)} |"
        )
    out += [
        "",
        "## Traffic and capacity use",
        "",
        "| target | requests | prompt tokens | generation tokens | tokens/s | peak hour tokens/s | peak/mean "
        "| hours without traffic | KV p90 / max | running/cap max | sustained tokens/s |",
        "|---|" + "---:|" * 10,
    ]
    for e in rows:
        sm = e.summary
        kv, util = sm.kv_usage, sm.running_over_cap
        out.append(
            f"| {e.target} | {sm.requests:,} | {sm.prompt_tokens:,} | {sm.generation_tokens:,} "
            f"| {_n(sm.generation_tokens_per_s)} | {_n(sm.peak_hour_generation_tokens_per_s)} "
            f"| {_n(sm.peak_to_mean, 2)} | {_pct(sm.hours_without_traffic_share)} "
            f"| {_pct(kv.p90)} / {_pct(kv.max)} | {_pct(util.max)} | {_n(sm.sustained_generation_tokens_per_s)} |"
        )
    out += _busiest(f.busiest_hour)
    out += [
        "",
        "## Economics (reservation-based: idle hours are paid)",
        "",
        "| target | GPU-hours | cost | per 1M gen | per 1M prompt | idle unpaid | per 1M gen, idle unpaid "
        "| following traffic | peak / quiet replicas |",
        "|---|" + "---:|" * 8,
    ]
    for e in rows:
        ec = e.costs
        out.append(
            f"| {e.target} | {_n(ec.gpu_hours, 2)} | {_usd(ec.cost_usd)} | {_usd(ec.cost_per_1m_generation_tokens_usd)} "
            f"| {_usd(ec.cost_per_1m_prompt_tokens_usd)} | {_usd(ec.cost_if_idle_unpaid_usd)} "
            f"| {_usd(ec.cost_per_1m_generation_tokens_if_idle_unpaid_usd)} | {_usd(ec.cost_following_traffic_usd)} "
            f"| {_n(e.sizing.peak_replicas_needed)} / {_n(e.sizing.quiet_replicas_needed)} |"
        )
    if c.api_cost_usd is not None:
        out += [
            "",
            f"API prices would have billed {_usd(c.api_cost_usd)}; break-even at "
            f"{_n(c.break_even_traffic_multiple, 2)}× the traffic.",
        ]
    out += _planned(doc.planned)
    out += ["", "## Incidents", ""]
    if doc.incidents:
        out += [
            "| start | end | minutes | target | class | finding | explanation |",
            "|---|---|---:|---|---|---|---|",
        ]
        out += [
            f"| {i.start_iso} | {i.end_iso} | {i.minutes} | {md(i.target)} | {i.cls} "
            f"| {md(i.finding)} | {md(i.explanation)} |"
            for i in doc.incidents
        ]
    else:
        out.append("No limit was hit and no target was down.")
    return "\n".join(out) + "\n"


def _busiest(b: Closeness | None) -> list[str]:
    """How near the busiest hour came to each limit."""
    if not b:
        return []
    return [
        "",
        f"Busiest hour {b.start_iso}: KV peaked at {_pct(b.kv_usage_max)} "
        f"({b.kv_cache_closeness:.2f} of the KV limit), running/cap {_pct(b.batch_cap_closeness)}, "
        + (
            f"ITL at {_n(b.itl_ratio_max, 2)}× its baseline"
            if b.itl_ratio_max
            else "no ITL baseline learned yet"
        )
        + "; minutes at each limit: "
        + ", ".join(f"{k} {v}" for k, v in b.limit_minutes.items())
        + ".",
    ]


def _planned(pl: Planned | None) -> list[str]:
    """What the plan's configuration would have cost beside what was paid (with --slo)."""
    if not pl:
        return []
    slos = ", ".join(f"{k[:-2]} ≤ {v:g} s" for k, v in pl.slos.items())
    out = [
        "",
        f"## Planned for {slos}",
        "",
        "| target | flags | GPU-hours paid | GPU-hours planned | cost paid | cost planned |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in pl.targets:
        flags = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in (r.changes or {}).items()) or "as run"
        flags = r.why if not r.feasible and r.why else flags
        out.append(
            f"| {r.target} | {flags} | {_n(r.paid_gpu_hours, 2)} | {_n(r.gpu_hours, 2)} "
            f"| {_usd(r.paid_cost_usd)} | {_usd(r.cost_usd)} |"
        )
    return out
