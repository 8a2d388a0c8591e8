"""Outside text in log lines, the runbook page and Alertmanager annotations: shown as text, never as markup."""

from __future__ import annotations

import html
import io
import logging
import re
from pathlib import Path

from kvdoctor.daemon.logs import TextFormatter, setup_logging
from kvdoctor.notify.alertmanager import to_alert
from kvdoctor.notify.alerts import AlertView
from kvdoctor.notify.config import AlertmanagerConfig
from kvdoctor.rules.loader import load_files
from kvdoctor.web.runbook import render

HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'


def test_a_newline_in_a_label_value_cannot_forge_a_log_line() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(TextFormatter("%(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger("kvdoctor.test.forge")
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.INFO)
    try:
        model = "llama\nERROR kvdoctor: target vllm-b:8000 down\r\x1b[2J"
        log.info("%s · %s: %s (was %s)", "vllm-a:8000", model, "healthy", "-")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("cycle failed")
    finally:
        log.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert (
        lines[0]
        == r"INFO kvdoctor.test.forge: vllm-a:8000 · llama\nERROR kvdoctor: target vllm-b:8000 down\r\x1b[2J: healthy (was -)"
    )
    assert not any(ln.startswith("ERROR kvdoctor: target") for ln in lines)
    assert lines[1] == "ERROR kvdoctor.test.forge: cycle failed" and lines[2].startswith(
        "Traceback"
    )  # kept whole


def test_the_daemon_text_log_uses_the_one_line_formatter() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("text", "info")
        assert isinstance(root.handlers[0].formatter, TextFormatter)
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])


def test_the_runbook_page_shows_a_hostile_rule_as_text(tmp_path: Path) -> None:
    rules = tmp_path / "hostile.yml"
    rules.write_text(f"""groups:
- name: hostile
  rules:
  - alert: HostileFinding
    expr: vector(1)
    labels: {{finding: 'x{html.escape("<b>", quote=False)}', severity: warning}}
    annotations:
      summary: '{HOSTILE} on {{{{ $labels.target }}}}'
      description: 'see `{HOSTILE}`'
      advice: '{HOSTILE}'
      runbook_url: '/runbook#"><script>alert(3)</script>'
""")
    page = render(load_files([rules]))
    assert "<script>" not in page and "<img" not in page and "onerror=alert(2)>" not in page
    assert html.escape(HOSTILE, quote=True) in page
    # every attribute stays closed: an anchor can only hold escaped quotes
    for attr in re.findall(r'(?:id|href)="([^"]*)"', page):
        assert "<" not in attr and ">" not in attr, attr


def test_alertmanager_annotations_carry_text_as_written_and_only_web_runbook_links() -> None:
    alert = {
        "target": "t",
        "model_name": "<!channel>",
        "finding": "kv_cache",
        "severity": "warning",
        "summary": "KV full on <!channel>\nline two",
        "advice": [],
        "runbook": "javascript:alert(1)",
    }
    out = to_alert(AlertView.from_dict(alert), AlertmanagerConfig(urls=["http://am"]), 1.0e9)
    assert (
        out["labels"]["model_name"] == "<!channel>"
    )  # a label value is data; receivers' templates escape it
    assert "runbook_url" not in out["annotations"]
    alert["runbook"] = "https://kvdoctor.example/runbook#kv_cache"
    assert (
        to_alert(AlertView.from_dict(alert), AlertmanagerConfig(urls=["http://am"]), 1.0e9)["annotations"][
            "runbook_url"
        ]
        == alert["runbook"]
    )
