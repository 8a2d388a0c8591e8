"""The `notify:` section of kvdoctor's config, plus KVDOCTOR_SLACK_* environment overrides."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kvdoctor.config.yamlpos import KeyPath, Located, Problems, Where
from kvdoctor.jsondoc import JsonObject
from kvdoctor.notify.matchers import LABELS, Matcher, parse_duration, parse_matchers, parse_time
from kvdoctor.notify.redact import register_secret

ENV_KEYS = {
    "KVDOCTOR_SLACK_WEBHOOK_URL": "webhook_url",
    "KVDOCTOR_SLACK_TOKEN": "token",
    "KVDOCTOR_SLACK_CHANNEL": "channel",
    "KVDOCTOR_SLACK_BASE_URL": "base_url",
}
DEFAULT_SLACK_BASE_URL = "https://slack.com/api/"


class Secret(str):
    """A string whose repr and str never show the value; use .reveal() where it must be sent."""

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def reveal(self) -> str:
        """The real value, for the one place that sends it."""
        return str.__str__(self)


@dataclass(frozen=True)
class SlackConfig:
    """Slack: an incoming webhook, or a bot token plus default channel (chat.postMessage/chat.update)."""

    webhook_url: Secret | None = None
    token: Secret | None = None
    channel: str = ""
    base_url: str = DEFAULT_SLACK_BASE_URL
    timeout: float = 10.0
    retries: int = 2  # per request, by slack-sdk's retry handlers; the outbox retries beyond that

    @property
    def mode(self) -> str:
        """'bot', 'webhook' or '' (Slack disabled)."""
        return "bot" if self.token else "webhook" if self.webhook_url else ""


@dataclass(frozen=True)
class AlertmanagerConfig:
    """Alertmanager API v2 endpoints kvdoctor pushes alerts to."""

    urls: tuple[str, ...] = ()
    generator_url: str = ""
    timeout: float = 5.0
    ends_at_after: float = 240.0  # endsAt horizon of active alerts, as Prometheus does (4 × resend)
    resend_resolved_for: float = 300.0
    job: str = "vllm"  # the `job` label of pushed alerts: the config's `job`, as Prometheus' scrape has


@dataclass(frozen=True)
class Silence:
    """Suppress notifications for findings matching all matchers within [starts, ends)."""

    matchers: tuple[Matcher, ...]
    starts: float | None = None
    ends: float | None = None
    comment: str = ""

    def active(self, labels: dict[str, str], now: float) -> bool:
        """True when the silence covers these labels at time now."""
        if self.starts is not None and now < self.starts:
            return False
        if self.ends is not None and now >= self.ends:
            return False
        return all(m.matches(labels) for m in self.matchers)


@dataclass(frozen=True)
class Route:
    """Send incidents whose labels match to a Slack channel (first match wins)."""

    matchers: tuple[Matcher, ...]
    channel: str


@dataclass(frozen=True)
class NotifyConfig:
    """Everything the notification layer needs; durations in seconds."""

    enabled: bool = True
    slack: SlackConfig = field(default_factory=SlackConfig)
    alertmanager: AlertmanagerConfig = field(default_factory=AlertmanagerConfig)
    for_: float = 60.0
    for_overrides: dict[str, float] = field(default_factory=dict)
    resolve_after: float = 60.0
    repeat_interval: float = 4 * 3600.0
    update_interval: float = 300.0
    group_by: tuple[str, ...] = ("target",)
    silences: tuple[Silence, ...] = ()
    routes: tuple[Route, ...] = ()
    status_page_url: str = ""
    grafana_url: str = ""
    outbox_path: str = ""
    retry_initial: float = 2.0
    retry_max: float = 300.0


def _url(v: Any, where: Where, problems: Problems, secret: bool = False) -> str | None:
    ok = isinstance(v, str) and urlsplit(v).scheme in ("http", "https") and bool(urlsplit(v).netloc)
    if not ok:
        problems.at(where, "must be an http(s) URL" + ("" if secret else f", got {v!r}"))
        return None
    return str(v)


def _str(v: Any, where: Where, problems: Problems) -> str | None:
    if not isinstance(v, str):
        problems.at(where, "must be a string")
        return None
    return v


def _num(v: Any, path: KeyPath, problems: Problems, lo: float = 0.0) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or v < lo:
        problems.at(path, f"must be a number ≥ {lo:g}")
        return None
    return float(v)


def _section(v: Any, path: KeyPath, problems: Problems, allowed: set[str]) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        problems.at(path, "must be a mapping")
        return {}
    for k in v:
        if k not in allowed:
            problems.at((*path, str(k)), "unknown key")
    return {k: x for k, x in v.items() if k in allowed}


def _slack(raw: Any, env: Mapping[str, str], problems: Problems) -> SlackConfig:
    p: KeyPath = ("notify", "slack")
    s = _section(raw, p, problems, {*ENV_KEYS.values(), "timeout", "retries"})
    src: dict[str, Where] = {k: (*p, k) for k in s}
    for var, key in ENV_KEYS.items():
        if env.get(var):
            s[key], src[key] = env[var], var
    out: dict[str, Any] = {}
    if "webhook_url" in s and (u := _url(s["webhook_url"], src["webhook_url"], problems, secret=True)):
        out["webhook_url"] = Secret(u)
    if "token" in s and (t := _str(s["token"], src["token"], problems)):
        out["token"] = Secret(t)
    if "channel" in s and (c := _str(s["channel"], src["channel"], problems)) is not None:
        out["channel"] = c
    if "base_url" in s and (b := _url(s["base_url"], src["base_url"], problems)):
        out["base_url"] = b if b.endswith("/") else b + "/"
    if "timeout" in s and (d := parse_duration(s["timeout"], (*p, "timeout"), problems)) is not None:
        out["timeout"] = d
    if "retries" in s and (r := _num(s["retries"], (*p, "retries"), problems)) is not None:
        out["retries"] = int(r)
    for secret in (out.get("webhook_url"), out.get("token")):
        register_secret(secret.reveal() if secret else None)
    if out.get("token") and out.get("webhook_url"):
        problems.at(p, "set either webhook_url or token (+ channel), not both")
    if out.get("token") and not out.get("channel"):
        problems.at((*p, "channel"), "required with a bot token (or set KVDOCTOR_SLACK_CHANNEL)")
    return SlackConfig(**out)


def _alertmanager(raw: Any, problems: Problems) -> AlertmanagerConfig:
    p: KeyPath = ("notify", "alertmanager")
    allowed = {"url", "urls", "generator_url", "timeout", "ends_at_after", "resend_resolved_for"}
    a = _section(raw, p, problems, allowed)
    urls: list[str] = []
    if "url" in a and (u := _url(a["url"], (*p, "url"), problems)):
        urls.append(u)
    if "urls" in a:
        if not isinstance(a["urls"], list):
            problems.at((*p, "urls"), "must be a list of URLs")
        else:
            urls += [u for i, x in enumerate(a["urls"]) if (u := _url(x, (*p, "urls", i), problems))]
    out: dict[str, Any] = {"urls": tuple(u.rstrip("/") for u in urls)}
    if "generator_url" in a and (g := _url(a["generator_url"], (*p, "generator_url"), problems)):
        out["generator_url"] = g
    for k in ("timeout", "ends_at_after", "resend_resolved_for"):
        if k in a and (d := parse_duration(a[k], (*p, k), problems)) is not None:
            out[k] = d
    return AlertmanagerConfig(**out)


def _silences(raw: Any, problems: Problems) -> tuple[Silence, ...]:
    if not isinstance(raw, list):
        problems.at(("notify", "silences"), "must be a list")
        return ()
    out = []
    for i, item in enumerate(raw):
        p: KeyPath = ("notify", "silences", i)
        s = _section(item, p, problems, {"matchers", "starts", "ends", "comment"})
        if "matchers" not in s:
            problems.at((*p, "matchers"), "required")
        matchers = parse_matchers(s.get("matchers", []), (*p, "matchers"), problems)
        starts = parse_time(s["starts"], (*p, "starts"), problems) if "starts" in s else None
        ends = parse_time(s["ends"], (*p, "ends"), problems) if "ends" in s else None
        if starts is not None and ends is not None and ends <= starts:
            problems.at((*p, "ends"), "must be after starts")
        out.append(Silence(matchers, starts, ends, str(s.get("comment", ""))))
    return tuple(out)


def _routes(raw: Any, problems: Problems) -> tuple[Route, ...]:
    if not isinstance(raw, list):
        problems.at(("notify", "routes"), "must be a list")
        return ()
    out = []
    for i, item in enumerate(raw):
        p: KeyPath = ("notify", "routes", i)
        r = _section(item, p, problems, {"matchers", "channel"})
        channel = _str(r.get("channel"), (*p, "channel"), problems)
        matchers = parse_matchers(r.get("matchers", []), (*p, "matchers"), problems)
        if channel:
            out.append(Route(matchers, channel))
    return tuple(out)


# A data table, the keys `notify:` takes (fmt: skip keeps it to four lines, not one key a line).
_TOP = {"enabled", "slack", "alertmanager", "for", "for_overrides", "resolve_after", "repeat_interval",
        "update_interval", "group_by", "silences", "routes", "status_page_url", "grafana_url", "outbox_path",
        "retry"}  # fmt: skip


def parse_notify_config(
    section: JsonObject | None, env: Mapping[str, str], doc: Located | None = None
) -> tuple[NotifyConfig, list[str]]:
    """Parse `notify:` and the environment; returns the config and every error found (never raises), each placed at
    the file:line of doc (the config it came from: `Config.doc`) or at the environment variable that set it."""
    problems = Problems(doc)
    n = _section(section, ("notify",), problems, _TOP)
    out: dict[str, Any] = {"slack": _slack(n.get("slack"), env, problems)}
    out["alertmanager"] = _alertmanager(n.get("alertmanager"), problems)
    if "enabled" in n:
        if isinstance(n["enabled"], bool):
            out["enabled"] = n["enabled"]
        else:
            problems.at(("notify", "enabled"), "must be true or false")
    for key, attr in (
        ("for", "for_"),
        ("resolve_after", "resolve_after"),
        ("repeat_interval", "repeat_interval"),
        ("update_interval", "update_interval"),
    ):
        if key in n and (d := parse_duration(n[key], ("notify", key), problems)) is not None:
            out[attr] = d
    if "for_overrides" in n:
        fo = n["for_overrides"]
        if not isinstance(fo, dict):
            problems.at(("notify", "for_overrides"), "must be a mapping of finding name to duration")
        else:
            ds = {
                str(k): parse_duration(v, ("notify", "for_overrides", str(k)), problems)
                for k, v in fo.items()
            }
            out["for_overrides"] = {k: d for k, d in ds.items() if d is not None}
    if "group_by" in n:
        g = n["group_by"]
        if not isinstance(g, list) or not all(isinstance(x, str) and x in LABELS for x in g):
            problems.at(("notify", "group_by"), f"must be a list of labels from {', '.join(LABELS)}")
        else:
            out["group_by"] = tuple(g)
    if "silences" in n:
        out["silences"] = _silences(n["silences"], problems)
    if "routes" in n:
        out["routes"] = _routes(n["routes"], problems)
    for key in ("status_page_url", "grafana_url"):
        if key in n and (u := _url(n[key], ("notify", key), problems)):
            out[key] = u.rstrip("/")
    if "outbox_path" in n and (o := _str(n["outbox_path"], ("notify", "outbox_path"), problems)):
        out["outbox_path"] = o
    r = _section(n.get("retry"), ("notify", "retry"), problems, {"initial", "max"})
    for key, attr in (("initial", "retry_initial"), ("max", "retry_max")):
        if key in r and (d := parse_duration(r[key], ("notify", "retry", key), problems)) is not None:
            out[attr] = d
    return NotifyConfig(**out), problems.lines
