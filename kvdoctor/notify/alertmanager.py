"""Alertmanager sink: push active and just-resolved alerts to /api/v2/alerts every cycle."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from urllib.parse import urlencode

import requests

from kvdoctor.jsondoc import JsonObject
from kvdoctor.notify.alerts import AlertView
from kvdoctor.notify.config import AlertmanagerConfig
from kvdoctor.notify.redact import describe_error, redact, redacting_logger
from kvdoctor.rules.loader import default_rule_files, load_files

log = redacting_logger("kvdoctor.notify.alertmanager")


@functools.cache
def pack_alertnames() -> dict[str, str]:
    """finding → alertname, as the shipped rule pack names its alerting rules (the one vocabulary)."""
    out: dict[str, str] = {}
    for group in load_files(default_rule_files()):
        for rule in group.rules:
            if rule.kind == "alert" and "finding" in rule.labels:
                out.setdefault(rule.labels["finding"], rule.name)
    return out


def alertname(alert: AlertView) -> str:
    """The pack's alertname for the finding; VLLM<CamelCaseFinding> for one only Python can see."""
    finding = alert.finding
    known = pack_alertnames().get(finding)
    return known or "VLLM" + "".join(p.capitalize() for p in finding.split("_"))


def rfc3339(t: float) -> str:
    """Unix seconds → RFC 3339 UTC with milliseconds."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def shifted(a: AlertView, offset: float) -> AlertView:
    """An alert view with its times moved by offset seconds (replay: the recording's clock → now)."""
    if not offset:
        return a

    def moved(t: float | None) -> float | None:
        return t + offset if t is not None else None

    return replace(
        a,
        started=moved(a.started),
        last_seen=moved(a.last_seen),
        fired_at=moved(a.fired_at),
        resolved_at=moved(a.resolved_at),
        since=moved(a.since),
    )


def to_alert(a: AlertView, config: AlertmanagerConfig, now: float, job: str | None = None) -> JsonObject:
    """One Alertmanager API v2 postable alert for a lifecycle alert view (job: the target's, else config.job)."""
    # The labels Prometheus gives the pack's alerts (job, instance, model_name + the rule's own), so that one
    # Alertmanager config groups, routes and inhibits both alike; `target` would only repeat `instance`.
    labels = {
        "alertname": alertname(a),
        "job": job or config.job,
        "instance": a.target,
        "model_name": a.model_name,
        "finding": a.finding,
        "severity": a.severity,
        "bottleneck": a.bottleneck or "",
    }
    advice = "\n".join(f"{x.flag}: {x.text}" if x.flag else x.text for x in a.advice)
    # Annotations carry the text as written (receivers' templates escape for their medium, as for Prometheus'
    # own alerts); the runbook link only if it is a web URL, never javascript: or data:.
    runbook = a.runbook
    annotations = {
        "summary": a.summary,
        "description": a.description,
        "advice": advice,
        "runbook_url": runbook if runbook.startswith(("https://", "http://")) else "",
    }
    ends = a.resolved_at if a.status == "resolved" and a.resolved_at else now + config.ends_at_after
    out: JsonObject = {
        "labels": {k: str(v) for k, v in labels.items() if v != ""},
        "annotations": {k: v for k, v in annotations.items() if v},
        "startsAt": rfc3339(a.fired_at or now),
        "endsAt": rfc3339(ends),
    }
    if config.generator_url:
        sep = "&" if "?" in config.generator_url else "?"
        out["generatorURL"] = (
            config.generator_url + sep + urlencode({"target": a.target, "model_name": a.model_name})
        )
    return out


class AlertmanagerSink:
    """Pushes the latest alert set from a background thread; a newer cycle replaces an unsent older one."""

    def __init__(self, config: AlertmanagerConfig, session: requests.Session | None = None) -> None:
        self.config = config
        self.session = session or requests.Session()
        self._cond = threading.Condition()
        self._latest: list[JsonObject] | None = None
        self._busy = False
        self._stop = False
        self.last_error = ""
        # the `job` of a target by name, when it has its own (--source prometheus: the job Prometheus scrapes it in)
        self.job_of: Callable[[str], str | None] | None = None
        self._thread = threading.Thread(target=self._run, name="kvdoctor-alertmanager", daemon=True)
        self._thread.start()

    def submit(self, alerts: list[AlertView], now: float, offset: float = 0.0) -> None:
        """Queue this cycle's alerts (Alertmanager expects re-sends while active); offset shifts every time."""
        if not alerts or not self.config.urls:
            return
        job_of = self.job_of or (lambda _: None)
        payload = [to_alert(shifted(a, offset), self.config, now + offset, job_of(a.target)) for a in alerts]
        with self._cond:
            self._latest = payload
            self._cond.notify_all()

    def post(self, payload: list[JsonObject]) -> list[tuple[bool, str]]:
        """POST to every configured Alertmanager; returns (ok, redacted result line) per URL."""
        out = []
        for url in self.config.urls:
            where = redact(url)
            try:
                r = self.session.post(f"{url}/api/v2/alerts", json=payload, timeout=self.config.timeout)
                r.raise_for_status()
                out.append((True, f"alertmanager {where}: ok ({len(payload)} alerts)"))
            except Exception as e:
                self.last_error = describe_error(e)
                log.warning("alertmanager push to %s failed: %s", where, self.last_error)
                out.append((False, f"alertmanager {where}: failed: {self.last_error}"))
        return out

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._latest is None and not self._stop:
                    self._cond.wait()
                if self._stop and self._latest is None:
                    return
                payload, self._latest, self._busy = self._latest, None, True
            try:
                self.post(payload or [])
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until the latest submitted alerts were pushed."""
        with self._cond:
            return self._cond.wait_for(lambda: self._latest is None and not self._busy, timeout)

    def send_test(self, now: float) -> list[tuple[bool, str]]:
        """Push a short-lived test alert (KvdoctorTest, endsAt now + 1m): kvdoctor's own, not a vLLM finding."""
        alert = {
            "labels": {"alertname": "KvdoctorTest", "severity": "info"},
            "annotations": {"summary": "kvdoctor test notification"},
            "startsAt": rfc3339(now),
            "endsAt": rfc3339(now + 60),
        }
        return self.post([alert])

    def close(self, timeout: float = 5.0) -> None:
        """Push what is queued, then stop the thread."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout)
