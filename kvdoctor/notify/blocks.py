"""Block Kit rendering of notification events, validated against Slack's limits by slack_sdk.models."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlencode

from slack_sdk.models.blocks import Block

from kvdoctor import fmt
from kvdoctor.jsondoc import JsonObject
from kvdoctor.notify.alerts import AlertView, Event, Evidence
from kvdoctor.signals import FINDINGS, SIGNALS

ICONS = {"critical": ":red_circle:", "warning": ":large_orange_circle:", "info": ":large_blue_circle:"}
MAX_HEADER, MAX_FIELDS, MAX_FIELD, MAX_TEXT, MAX_BLOCKS = 150, 10, 2000, 3000, 50


@dataclass(frozen=True)
class Links:
    """Base URLs for the context links (empty = no link)."""

    status_page_url: str = ""
    grafana_url: str = ""


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def escape(text: object) -> str:
    """Text from outside (labels, annotations, errors) made inert in mrkdwn: Slack's three control characters."""
    # https://api.slack.com/reference/surfaces/formatting#escaping: only &, < and > are decoded; `<!channel>`,
    # `<@U…>` and `<url|label>` need a `<`, so links and mentions can only come from kvdoctor's own templates.
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def link_url(url: str) -> str:
    """A URL fit for `<url|label>`: the characters that would end it or start a label percent-encoded."""
    return "".join(f"%{ord(c):02X}" if c in "<>| " or ord(c) < 32 else c for c in url)


def _escaped(alert: AlertView) -> AlertView:
    """A copy of an alert view with every string inside escaped, but for the runbook URL (a link target)."""

    def walk(x: Any) -> Any:
        if isinstance(x, str):
            return escape(x)
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [walk(v) for v in x]
        return x

    return AlertView.from_dict({**walk(asdict(alert)), "runbook": alert.runbook})


def mrkdwn(text: str) -> JsonObject:
    """A mrkdwn text object; verbatim, so Slack does not turn bare URLs or channel names in it into links."""
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def title_of(alert: AlertView) -> str:
    """Short title of one alert: the limit hit, or the finding name in words."""
    kind = FINDINGS.get(alert.bottleneck or "")
    return kind.title if kind and kind.title else alert.finding.replace("_", " ").capitalize()


def _where(ev: Event, a: AlertView) -> str:
    return f"{a.target or ev.group_labels.get('target', '')} · {a.model_name}".strip(" ·")


# Variants of one quantity share a field: (key shown first, [(extra key, its short label)…]).
MERGED = (
    (
        "kv_usage_max_1m",
        [("kv_usage", "now"), ("kv_usage_max_30s", "30s peak"), ("kv_usage_avg_1m", "1m avg")],
    ),
    ("kv_usage", [("kv_usage_max_30s", "30s peak"), ("kv_usage_avg_1m", "1m avg")]),
    ("running_max_1m", [("running", "now"), ("running_avg_1m", "1m avg")]),
    ("running", [("running_avg_1m", "1m avg")]),
    ("waiting", [("waiting_avg_1m", "1m avg")]),
    ("ttft_p95_s", [("slo_ttft_p95_s", "SLO")]),
    ("itl_p95_s", [("itl_p50_s", "p50"), ("itl_baseline_s", "baseline"), ("slo_itl_p95_s", "SLO")]),
    ("itl_p50_s", [("itl_baseline_s", "baseline"), ("slo_itl_p95_s", "SLO")]),
)


def evidence_fields(evidence: Evidence) -> list[JsonObject]:
    """Up to 10 mrkdwn fields for the evidence, known keys first, variants of one quantity in one field."""
    ev = dict(evidence)
    out: list[tuple[str, str]] = []
    run = next((k for k in ("running_max_1m", "running") if k in ev), None)
    cap = next((k for k in ("batch_cap_configured", "batch_cap_inferred") if k in ev), None)
    if run and cap:
        extra = (
            f" (1m avg {fmt.value('running_avg_1m', ev['running_avg_1m'])})" if "running_avg_1m" in ev else ""
        )
        out.append(("Running / cap", f"{fmt.value(run, ev[run])} / {fmt.value(cap, ev[cap])}{extra}"))
        for k in ("running_max_1m", "running", "running_avg_1m", cap):
            ev.pop(k, None)
    extras: dict[str, str] = {}
    for key, variants in MERGED:
        if key in ev and key not in extras:
            parts = [f"{short} {fmt.value(k, ev.pop(k))}" for k, short in variants if k in ev]
            extras[key] = f" ({', '.join(parts)})" if parts else ""
    order = {k: i for i, k in enumerate(SIGNALS)}
    for k in sorted(ev, key=lambda k: (order.get(k, len(order)), k)):
        out.append((fmt.label_of(k), fmt.value(k, ev[k]) + extras.get(k, "")))
    return [mrkdwn(_cut(f"*{escape(label)}*\n{escape(val)}", MAX_FIELD)) for label, val in out[:MAX_FIELDS]]


def advice_text(alerts: list[AlertView]) -> str:
    """The 'what to change' section: each vLLM flag with its quantified effect, deduplicated (alerts escaped)."""
    lines, seen = [], set()
    for a in alerts:
        for adv in a.advice:
            if (adv.flag, adv.text) in seen:
                continue
            seen.add((adv.flag, adv.text))
            flag = f"`{adv.flag}`: " if adv.flag else ""
            src = f" _({adv.source})_" if adv.source else ""
            lines.append(f"• {flag}{adv.text}{src}")
            if adv.predicted:
                lines.append(f"   _predicted: {adv.predicted}_")
    return _cut("*What to change*\n" + "\n".join(lines), MAX_TEXT) if lines else ""


def _links(ev: Event, a: AlertView, links: Links) -> list[str]:
    q = {"target": a.target, "model_name": a.model_name}
    out = []
    if links.status_page_url:
        out.append(f"<{link_url(links.status_page_url)}/?{urlencode(q)}|Status page>")
    if links.grafana_url:
        sep = "&" if "?" in links.grafana_url else "?"
        g = {
            "var-target": q["target"],
            "var-model_name": q["model_name"],
            "from": int(ev.opened - 900) * 1000,
            "to": "now" if ev.kind != "resolved" else int(ev.t + 300) * 1000,
        }
        out.append(f"<{link_url(links.grafana_url)}{sep}{urlencode(g)}|Grafana>")
    if a.runbook.startswith(("https://", "http://")):  # no javascript: or slack:// links
        out.append(f"<{link_url(a.runbook)}|Runbook>")
    return out


def _context(ev: Event, a: AlertView, links: Links, lead: str) -> JsonObject:
    parts = [lead, f"finding `{escape(a.finding)}`", *_links(ev, a, links)]
    return {"type": "context", "elements": [mrkdwn(_cut(" · ".join(parts), MAX_TEXT))]}


def _others(alerts: list[AlertView]) -> JsonObject | None:
    if len(alerts) < 2:
        return None
    lines = [f"• {ICONS.get(a.severity, '')} *{title_of(a)}* ({a.status}): {a.summary}" for a in alerts[1:]]
    return {
        "type": "section",
        "text": mrkdwn(_cut("*Also on this target*\n" + "\n".join(lines), MAX_TEXT)),
    }


def _text_section(text: str) -> JsonObject:
    return {"type": "section", "text": mrkdwn(_cut(text or " ", MAX_TEXT))}


def event_message(ev: Event, links: Links, *, root: bool = True) -> tuple[str, list[JsonObject]]:
    """Fallback text and Block Kit blocks for an event (root message, or thread reply when root=False)."""
    raw = ev.alerts[0] if ev.alerts else AlertView()
    # Everything from outside is escaped once, here; only the plain_text header (never parsed) gets it raw.
    alerts = [_escaped(x) for x in ev.alerts]
    a = alerts[0] if alerts else raw
    where, title = escape(_where(ev, raw)), escape(title_of(raw))
    icon = ICONS.get(raw.severity, "")
    if ev.kind == "resolved":
        # The problem's own span: from when the first finding started to hold to its last sighting.
        start = min([x.started or ev.opened for x in ev.alerts] or [ev.opened])
        end = max([x.last_seen or ev.t for x in ev.alerts] or [ev.t])
        lasted = fmt.duration(end - start)
        text = f"Resolved: {title} on {where} (lasted {lasted})"
        head = f"✅ Resolved: {title_of(raw)} · {_where(ev, raw)}"
        lead = f"started {fmt.clock(start)}, last seen {fmt.clock(end)}: lasted *{lasted}*"
        lead += " · numbers from when it fired" if root and a.fired_evidence else ""
    else:
        text = f"{title} on {where}: {a.summary}"
        head = f"{'🔁 Still firing: ' if ev.kind == 'repeat' else ''}{title_of(raw)} · {_where(ev, raw)}"
        lead = f"firing since {fmt.clock(ev.opened)}"
        if ev.kind == "repeat":
            lead += f" ({fmt.duration(ev.t - ev.opened)})"
    blocks: list[JsonObject] = []
    if root or ev.kind != "update":
        blocks.append(
            {"type": "header", "text": {"type": "plain_text", "text": _cut(head, MAX_HEADER), "emoji": True}}
        )
    body = f"{icon} *{a.summary}*" + (f"\n{a.description}" if a.description else "")
    if ev.changes:
        changes = "; ".join(escape(c) for c in ev.changes)
        body = "*Changed:* " + changes + "\n" + body
        text = text if ev.kind == "resolved" else f"{where}: " + changes
    blocks.append(_text_section(body))
    # A resolved root keeps the numbers that made it fire (the last ones are often already back to normal).
    evidence = raw.fired_evidence if root and ev.kind == "resolved" else None
    fields = evidence_fields(evidence or raw.evidence)  # escapes its own labels and values
    if fields:
        blocks.append({"type": "section", "fields": fields})
    if (others := _others(alerts)) is not None:
        blocks.append(others)
    if ev.kind != "resolved" and (adv := advice_text(alerts)):
        blocks += [{"type": "divider"}, _text_section(adv)]
    blocks.append(_context(ev, raw, links, lead))
    return _cut(text, MAX_TEXT), validate(blocks[:MAX_BLOCKS])


def validate(blocks: list[JsonObject]) -> list[JsonObject]:
    """Round-trip blocks through slack_sdk.models (raises SlackObjectFormationError beyond the limits)."""
    out = []
    for b in blocks:
        parsed = Block.parse(b)
        if parsed is None:
            raise ValueError(f"unparseable block type {b.get('type')!r}")
        out.append(parsed.to_dict())
    return out


def probe_message(links: Links, where: str = "kvdoctor") -> tuple[str, list[JsonObject]]:
    """A test message proving the sink is configured (kvdoctor notify test)."""
    text = f"kvdoctor test notification from {escape(where)}: Slack delivery works."
    extra = [
        x
        for x in (
            links.status_page_url and f"<{link_url(links.status_page_url)}|Status page>",
            links.grafana_url and f"<{link_url(links.grafana_url)}|Grafana>",
        )
        if x
    ]
    blocks: list[JsonObject] = [
        {"type": "header", "text": {"type": "plain_text", "text": "kvdoctor test notification"}},
        _text_section(text),
    ]
    if extra:
        blocks.append({"type": "context", "elements": [mrkdwn(" · ".join(extra))]})
    return text, validate(blocks)
