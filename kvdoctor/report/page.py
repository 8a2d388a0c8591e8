"""The report as one self-contained HTML file: the data, Chart.js (vendored), the page script and styles inline."""

from __future__ import annotations

import html
import json
from importlib import resources

from kvdoctor.report.document import Report
from kvdoctor.report.figures import Row
from kvdoctor.report.figures import dollars as _usd
from kvdoctor.report.figures import exact as _n
from kvdoctor.report.figures import percent as _pct
from kvdoctor.report.history import CLASSES

# Vendored from npm (`npm pack chart.js@4.6.1 chartjs-chart-matrix@3.1.0`), MIT; licenses next to them.
SCRIPTS = ("chart.umd.min.js", "chartjs-chart-matrix.min.js", "report.js")
# what a linked page (the daemon's /report) loads from report/static/, with its content type
ASSETS = {**dict.fromkeys(SCRIPTS, "text/javascript; charset=utf-8"), "report.css": "text/css; charset=utf-8"}
CHARTS = {
    "timeline": "Class timeline per target",
    "throughput": "Generation tokens/s per hour against sustained capacity",
    "heatmap": "Generation tokens/s by day of week and hour of day (UTC)",
    "cost": "Cost breakdown",
}


def _static(name: str) -> str:
    return resources.files("kvdoctor.report").joinpath("static", name).read_text(encoding="utf-8")


def asset(name: str) -> bytes:
    """One of ASSETS, as a linked page loads it."""
    return resources.files("kvdoctor.report").joinpath("static", name).read_bytes()


def _script(text: str) -> str:
    return text.replace("</script", "<\\/script")


def _table(head: list[str], rows: list[list[str]], text: tuple[int, ...] = (0,)) -> str:
    """A table; columns in `text` are left-aligned words, the others right-aligned numbers."""

    def cls(i: int) -> str:
        return ' class="t"' if i in text else ""

    th = "".join(f"<th{cls(i)}>{html.escape(h)}</th>" for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{c}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _tiles(doc: Report) -> str:
    fl = doc.fleet
    f, c = fl.summary, fl.costs
    tiles = [
        ("GPU-hours", _n(c.gpu_hours), f"idle {_pct(f.idle_share)}"),
        ("generation tokens", f"{f.generation_tokens:,}", f"{f.prompt_tokens:,} prompt"),
        ("requests", f"{f.requests:,}", f"peak-to-mean {_n(f.peak_to_mean, 2)}"),
        (
            "replicas needed",
            f"{_n(fl.sizing.peak_replicas_needed)} / {_n(fl.sizing.quiet_replicas_needed)}",
            f"peak / quiet, of {fl.replicas}",
        ),
        ("cost", _usd(c.cost_usd), f"{_usd(c.cost_per_1m_generation_tokens_usd)} per 1M generation"),
    ]
    return "".join(
        f'<div class="tile"><div class="label">{html.escape(a)}</div><div class="value">{html.escape(b)}</div>'
        f'<div class="sub">{html.escape(c)}</div></div>'
        for a, b, c in tiles
    )


def render_html(doc: Report, linked: bool = False) -> str:
    """A page that opens with no network: charts drawn by the inlined Chart.js from the inlined report data.

    linked: scripts and styles as files beside it (`report/static/`), for a server whose Content-Security-Policy
    refuses inline ones; the data stays inline, in a JSON block a CSP does not run."""
    r, fl = doc.range, doc.fleet
    rows = [
        Row(html.escape(e.target), html.escape(e.model_name), e.summary, e.costs, e.sizing)
        for e in doc.targets
    ]
    rows.append(Row("fleet", "", fl.summary, fl.costs, fl.sizing))
    hours_table = _table(
        ["target", "model", *CLASSES, "total", "idle"],
        [
            [
                e.target,
                e.model_name,
                *(_n(e.summary.hours[c], 2) for c in CLASSES),
                _n(e.summary.hours["total"], 2),
                _pct(e.summary.idle_share),
            ]
            for e in rows
        ],
        (0, 1),
    )
    money_table = _table(
        [
            "target",
            "GPU-hours",
            "cost",
            "per 1M gen",
            "per 1M prompt",
            "idle unpaid",
            "following traffic",
            "peak / quiet replicas",
        ],
        [
            [
                e.target,
                _n(e.costs.gpu_hours, 2),
                _usd(e.costs.cost_usd),
                _usd(e.costs.cost_per_1m_generation_tokens_usd),
                _usd(e.costs.cost_per_1m_prompt_tokens_usd),
                _usd(e.costs.cost_if_idle_unpaid_usd),
                _usd(e.costs.cost_following_traffic_usd),
                f"{_n(e.sizing.peak_replicas_needed)} / {_n(e.sizing.quiet_replicas_needed)}",
            ]
            for e in rows
        ],
    )
    incidents = (
        _table(
            ["start", "end", "min", "target", "class", "explanation"],
            [
                [
                    i.start_iso,
                    i.end_iso,
                    str(i.minutes),
                    html.escape(i.target),
                    f'<span class="badge badge-{i.cls}">{i.cls}</span>',
                    html.escape(i.explanation),
                ]
                for i in doc.incidents
            ],
            (0, 1, 3, 4, 5),
        )
        if doc.incidents
        else "<p>No limit was hit and no target was down.</p>"
    )
    recs = "".join(
        f"<li>{html.escape(x.text)}<div class='evidence'>Evidence: {html.escape(x.evidence)}</div></li>"
        for x in doc.recommendations
    )
    notes = "".join(f"<p class='note'>{html.escape(n)}</p>" for n in doc.notes)
    charts = "".join(
        f'<section class="chart"><h2>{html.escape(title)}</h2><div class="canvas-box" id="box-{cid}">'
        f'<canvas id="chart-{cid}" data-chart="{cid}"></canvas></div></section>'
        for cid, title in CHARTS.items()
    )
    # no `<`, `>` or `&` at all in the data block: neither `</script>` nor `<!--` can end or bend it
    data = (
        json.dumps(doc.to_json(), allow_nan=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    )
    if linked:
        scripts = "".join(f'<script src="report/static/{name}"></script>' for name in SCRIPTS)
        style = '<link rel="stylesheet" href="report/static/report.css">'
    else:
        scripts = "".join(f"<script>{_script(_static(name))}</script>" for name in SCRIPTS)
        style = f"<style>{_static('report.css')}</style>"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvdoctor capacity review {html.escape(r.start_iso)} – {html.escape(r.end_iso)}</title>
{style}</head>
<body><header><h1><span class="logo">kvdoctor</span> capacity review</h1>
<p class="range">{html.escape(r.start_iso)} – {html.escape(r.end_iso)} · {r.hours:.1f} h ·
{fl.replicas} replica(s) · {html.escape(doc.source)} · generated {html.escape(doc.generated)}</p></header>
<main><div class="tiles">{_tiles(doc)}</div>
<section><h2>Recommendations</h2><ol class="recs">{recs}</ol>{notes}</section>
<div class="charts">{charts}</div>
<section><h2>Time per class (hours)</h2>{hours_table}</section>
<section><h2>Economics (reservation-based: idle hours are paid)</h2>{money_table}</section>
<section><h2>Incidents</h2>{incidents}</section></main>
<pre id="chart-state" hidden></pre>
<script type="application/json" id="report-data">{data}</script>{scripts}</body></html>
"""
