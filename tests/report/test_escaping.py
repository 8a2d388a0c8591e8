"""The report shows outside text (target and model names, explanations) as text, in HTML and in Markdown tables."""

from __future__ import annotations

import json
import re
from dataclasses import replace

from kvdoctor.report.build import build_report
from kvdoctor.report.document import Report
from kvdoctor.report.economics import Prices
from kvdoctor.report.history import History
from kvdoctor.report.markdown import render_markdown
from kvdoctor.report.page import render_html
from kvdoctor.verdicts import Diagnosis, Finding

HOSTILE = "evil|model\n| x | <script>alert(1)</script> [click](https://evil.example) **bold** </script><!--"
T0 = 1796000400.0


def hostile_doc() -> Report:
    """Two hours of a target and model named HOSTILE, KV-bound for 20 minutes (an incident) in the middle."""
    history = History("kvdoctor serve")
    ev = {
        "requests_per_s": 2.0,
        "generation_tokens_per_s": 400.0,
        "prompt_tokens_per_s": 900.0,
        "kv_usage": 0.5,
        "running": 8.0,
        "batch_cap_configured": 64.0,
    }
    for k in range(480):
        t = T0 + 15 * k
        bound = 200 <= k < 280
        findings = (
            [
                Finding(
                    "kv_cache",
                    "warning",
                    HOSTILE,
                    HOSTILE,
                    {**ev, "kv_usage": 0.97},
                    bottleneck="kv_cache",
                    since=T0 + 3000,
                )
            ]
            if bound
            else []
        )
        d = Diagnosis(
            f"t{HOSTILE}",
            HOSTILE,
            t,
            "kv_cache" if bound else "healthy",
            T0,
            findings,
            evidence={**ev, "kv_usage": 0.97} if bound else ev,
        )
        history.observe([d], t, 15.0)
    doc = build_report(history, Prices(2.5, 1, None, None), now=T0 + 7200)
    assert doc.targets and doc.incidents, doc.incidents
    return replace(doc, notes=(*doc.notes, HOSTILE))


def _table_rows(md: str, header: str) -> list[str]:
    lines = md.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    rows = []
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        rows.append(ln)
    return rows


def test_markdown_tables_keep_their_columns_and_show_no_markup() -> None:
    doc = hostile_doc()
    md = render_markdown(doc)
    for header in (
        "| target | model |",
        "| target | requests |",
        "| target | GPU-hours |",
        "| start | end |",
    ):
        head = next(ln for ln in md.splitlines() if ln.startswith(header))
        columns = len(re.split(r"(?<!\\)\|", head))
        rows = _table_rows(md, header)
        assert rows, header
        for row in rows:  # an unescaped | or newline in a name would add or break columns
            assert len(re.split(r"(?<!\\)\|", row)) == columns, (header, row)
    assert "<script>" not in md and not re.search(r"(?<!\\)\]\(https://evil", md) and "**bold**" not in md
    assert "\\<script\\>" in md and "\\[click\\]" in md


def test_html_report_escapes_names_and_keeps_its_data_block_closed() -> None:
    doc = hostile_doc()
    page = render_html(doc)
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    # the data block holds no < at all, so no `</script>` or `<!--` inside it can end it early
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert m and "<" not in m.group(1)
    assert json.loads(m.group(1))["targets"][0]["model_name"] == HOSTILE
