"""The report as Markdown, for a ticket or a review document."""

from __future__ import annotations

import re
from typing import Any

from kvdoctor.report.figures import dollars as _usd
from kvdoctor.report.figures import exact as _n
from kvdoctor.report.figures import percent as _pct
from kvdoctor.report.history import CLASSES

# ASCII punctuation that starts Markdown syntax (emphasis, links, tables, HTML): backslash-escaped in outside text
_MARKUP = re.compile(r"([\\`*_\[\]{}<>|#!~&])")


def md(text: object) -> str:
    """Outside text (target, model, explanations) as literal Markdown: one line, its markup characters escaped."""
    return _MARKUP.sub(r"\\\1", " ".join(str(text).split()))


def render_markdown(doc: dict[str, Any]) -> str:
    """The whole report: summary, recommendations, per-target tables, incidents, economics."""
    r, f = doc["range"], doc["fleet"]
    rows = [*({**e, "target": md(e["target"]), "model_name": md(e["model_name"])} for e in doc["targets"])]
    rows.append({**f, "target": "**fleet**", "model_name": ""})
    out = [
        "# kvdoctor capacity review",
        "",
        f"{r['start_iso']} – {r['end_iso']} ({r['hours']:.1f} h), {f['replicas']} replica(s), source: {md(doc['source'])}.",
        "",
        f"- Served **{f['requests']:,}** requests, **{f['prompt_tokens']:,}** prompt and "
        f"**{f['generation_tokens']:,}** generation tokens ({_n(f['generation_tokens_per_s'])} tokens/s mean, "
        f"peak hour {_n(f['peak_hour_generation_tokens_per_s'])}, peak-to-mean {_n(f['peak_to_mean'], 2)}).",
        f"- Idle {_pct(f['idle_share'])} of {_n(f['gpu_hours'])} GPU-hours; "
        f"{_pct(f['hours_without_traffic_share'])} of the hours had no traffic.",
        f"- Replicas needed: {_n(f['peak_replicas_needed'])} at the peak hour, {_n(f['quiet_replicas_needed'])} "
        f"in quiet hours ({doc['headroom'] * 100:.0f} % headroom).",
    ]
    if f["cost_usd"] is not None:
        out.append(
            f"- Cost {_usd(f['cost_usd'])} reserved ({_usd(f['cost_per_1m_generation_tokens_usd'])} per 1M generation, "
            f"{_usd(f['cost_per_1m_prompt_tokens_usd'])} per 1M prompt tokens); {_usd(f['cost_if_idle_unpaid_usd'])} "
            f"without the idle hours; {_usd(f['cost_following_traffic_usd'])} following the traffic."
        )
    out += ["", "## Recommendations", ""]
    out += [
        f"{i}. {md(rec['text'])} *Evidence: {md(rec['evidence'])}.*"
        for i, rec in enumerate(doc["recommendations"], 1)
    ]
    out += [f"> {md(n)}" for n in doc["notes"]]
    out += [
        "",
        "## Time per class (hours)",
        "",
        "| target | model | " + " | ".join(CLASSES) + " | total | idle share |",
        "|---|---|" + "---:|" * (len(CLASSES) + 2),
    ]
    for e in rows:
        h = e["hours"]
        out.append(
            f"| {e['target']} | {e['model_name']} | "
            + " | ".join(_n(h[c], 2) for c in CLASSES)
            + f" | {_n(h['total'], 2)} | {_pct(e['idle_share'])} |"
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
        kv, util = e["kv_usage"], e["running_over_cap"]
        out.append(
            f"| {e['target']} | {e['requests']:,} | {e['prompt_tokens']:,} | {e['generation_tokens']:,} "
            f"| {_n(e['generation_tokens_per_s'])} | {_n(e['peak_hour_generation_tokens_per_s'])} "
            f"| {_n(e['peak_to_mean'], 2)} | {_pct(e['hours_without_traffic_share'])} "
            f"| {_pct(kv['p90'])} / {_pct(kv['max'])} | {_pct(util['max'])} | {_n(e['sustained_generation_tokens_per_s'])} |"
        )
    busiest = f["busiest_hour"]
    if busiest:
        out += [
            "",
            f"Busiest hour {busiest['start_iso']}: KV peaked at {_pct(busiest['kv_usage_max'])} "
            f"({busiest['kv_cache_closeness']:.2f} of the KV limit), running/cap {_pct(busiest['batch_cap_closeness'])}, "
            + (
                f"ITL at {_n(busiest['itl_ratio_max'], 2)}× its baseline"
                if busiest["itl_ratio_max"]
                else "no ITL baseline learned yet"
            )
            + "; minutes at each limit: "
            + ", ".join(f"{k} {v}" for k, v in busiest["limit_minutes"].items())
            + ".",
        ]
    out += [
        "",
        "## Economics (reservation-based: idle hours are paid)",
        "",
        "| target | GPU-hours | cost | per 1M gen | per 1M prompt | idle unpaid | per 1M gen, idle unpaid "
        "| following traffic | peak / quiet replicas |",
        "|---|" + "---:|" * 8,
    ]
    for e in rows:
        out.append(
            f"| {e['target']} | {_n(e['gpu_hours'], 2)} | {_usd(e['cost_usd'])} | {_usd(e['cost_per_1m_generation_tokens_usd'])} "
            f"| {_usd(e['cost_per_1m_prompt_tokens_usd'])} | {_usd(e['cost_if_idle_unpaid_usd'])} "
            f"| {_usd(e['cost_per_1m_generation_tokens_if_idle_unpaid_usd'])} | {_usd(e['cost_following_traffic_usd'])} "
            f"| {_n(e['peak_replicas_needed'])} / {_n(e['quiet_replicas_needed'])} |"
        )
    if f["api_cost_usd"] is not None:
        out += [
            "",
            f"API prices would have billed {_usd(f['api_cost_usd'])}; break-even at "
            f"{_n(f['break_even_traffic_multiple'], 2)}× the traffic.",
        ]
    out += _planned(doc.get("planned"))
    out += ["", "## Incidents", ""]
    if doc["incidents"]:
        out += [
            "| start | end | minutes | target | class | finding | explanation |",
            "|---|---|---:|---|---|---|---|",
        ]
        out += [
            f"| {i['start_iso']} | {i['end_iso']} | {i['minutes']} | {md(i['target'])} | {i['class']} "
            f"| {md(i['finding'])} | {md(i['explanation'])} |"
            for i in doc["incidents"]
        ]
    else:
        out.append("No limit was hit and no target was down.")
    return "\n".join(out) + "\n"


def _planned(pl: dict[str, Any] | None) -> list[str]:
    """What the plan's configuration would have cost beside what was paid (with --slo)."""
    if not pl:
        return []
    slos = ", ".join(f"{k[:-2]} ≤ {v:g} s" for k, v in pl["slos"].items())
    out = [
        "",
        f"## Planned for {slos}",
        "",
        "| target | flags | GPU-hours paid | GPU-hours planned | cost paid | cost planned |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in pl["targets"]:
        flags = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in r.get("changes", {}).items()) or "as run"
        flags = r.get("why", flags) if not r.get("feasible") and r.get("why") else flags
        out.append(
            f"| {r['target']} | {flags} | {_n(r['paid_gpu_hours'], 2)} | {_n(r['gpu_hours'], 2)} "
            f"| {_usd(r['paid_cost_usd'])} | {_usd(r['cost_usd'])} |"
        )
    return out
