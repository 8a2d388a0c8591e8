"""The report of the daemon's own history, as the status page's `/report` route serves it."""

from __future__ import annotations

import html
import json

from kvdoctor.report.build import build_report
from kvdoctor.report.document import scrubbed
from kvdoctor.report.economics import Prices, parse_usd
from kvdoctor.report.history import History, ReportError
from kvdoctor.report.markdown import render_markdown
from kvdoctor.report.page import ASSETS, asset, render_html

TYPES = {"html": "text/html; charset=utf-8", "md": "text/markdown; charset=utf-8", "json": "application/json"}


def _one(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[-1] if values else None


def prices_from_query(query: dict[str, list[str]]) -> Prices:
    """Prices from ?gpu_hour_cost=&gpus_per_target=&api_price_in=&api_price_out=; raises ValueError."""

    def usd(key: str) -> float | None:
        v = _one(query, key)
        return parse_usd(key, v) if v else None

    gpus = _one(query, "gpus_per_target") or "1"
    if not gpus.isdigit() or int(gpus) < 1:
        raise ValueError(f"gpus_per_target {gpus!r}: expected a whole number ≥ 1")
    return Prices(usd("gpu_hour_cost"), int(gpus), usd("api_price_in"), usd("api_price_out"))


def report_response(history: History, query: dict[str, list[str]], part: str = "") -> tuple[int, bytes, str]:
    """(status, body, content type) of the report over the daemon's history (?format=html|md|json), or of one
    of the files its page loads (part `static/NAME`)."""
    if part:
        name = part.removeprefix("static/")
        if name not in ASSETS or part != f"static/{name}":
            return 404, b"404 page not found\n", "text/plain; charset=utf-8"
        return 200, asset(name), ASSETS[name]
    fmt = _one(query, "format") or "html"
    if fmt not in TYPES:
        return 400, f"format {fmt!r}: expected html, md or json\n".encode(), "text/plain; charset=utf-8"
    try:
        doc = scrubbed(build_report(history, prices_from_query(query), query.get("target")))
    except (ReportError, ValueError) as exc:
        page = f"<!doctype html><title>kvdoctor report</title><p>No report yet: {html.escape(str(exc))}</p>"
        return (400 if not isinstance(exc, ReportError) else 200), page.encode(), TYPES["html"]
    body = (
        json.dumps(doc.to_json())
        if fmt == "json"
        else render_markdown(doc)
        if fmt == "md"
        else render_html(doc, linked=True)
    )
    return 200, body.encode(), TYPES[fmt]
