"""The routes of kvdoctor's web server as plain functions from a request to a response (no sockets here)."""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from kvdoctor import __version__
from kvdoctor.rules.loader import RuleGroup, default_rule_files, load_files
from kvdoctor.signals import FINDINGS, SIGNALS
from kvdoctor.status.health import NotifyStatus
from kvdoctor.status.state import DaemonState
from kvdoctor.web.responses import Response, api_error, json_response, text
from kvdoctor.web.runbook import render as render_runbook

log = logging.getLogger(__name__)

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
Reload = Callable[[], tuple[bool, str]]
Rules = Callable[[], list[RuleGroup]]
# the capacity report of the daemon's history: (part, query) -> (status, body, content type); part is "" for the
# page and "static/NAME" for the script and style files it loads (the daemon's CSP allows no inline ones)
Report = Callable[[str, dict[str, list[str]]], tuple[int, bytes, str]]


def load_static() -> dict[str, tuple[bytes, str, str]]:
    """Every file shipped in kvdoctor/web/static: name -> (content, content type, ETag)."""
    out: dict[str, tuple[bytes, str, str]] = {}
    static = resources.files("kvdoctor.web").joinpath("static")
    if not static.is_dir():
        log.error("status page files missing from the package (kvdoctor/web/static); serving the API only")
        return out
    for entry in static.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in TYPES:
            data = entry.read_bytes()
            out[entry.name] = (data, TYPES[suffix], '"' + hashlib.sha256(data).hexdigest()[:20] + '"')
    return out


class App:
    """Routes: /metrics, /api/v1/*, /-/healthy, /-/ready, /-/reload, /, /runbook, /report and /static/*."""

    def __init__(
        self,
        state: DaemonState,
        registry: CollectorRegistry,
        reload: Reload | None = None,
        notify_status: Callable[[], NotifyStatus | None] | None = None,
        rules: Rules | None = None,
        report: Report | None = None,
    ) -> None:
        self.state, self.registry = state, registry
        self.reload, self.notify_status, self.report = reload, notify_status, report
        self.rules = rules  # the rule groups in force (the runbook follows reloads); None: the shipped pack
        self._shipped: list[RuleGroup] | None = None
        self.static = load_static()
        self._reload_lock = threading.Lock()
        self.api: dict[str, Callable[[dict[str, list[str]]], Response]] = {
            "/api/v1/targets": self._targets,
            "/api/v1/diagnoses": self._diagnoses,
            "/api/v1/history": self._history,
            "/api/v1/status": self._status,
            "/api/v1/signals": self._signals,
        }

    def handle(self, method: str, target: str, headers: Mapping[str, str]) -> Response:
        """Answer one request (method, request-target as sent, headers)."""
        url = urlsplit(target)
        path, query = url.path, parse_qs(url.query)
        if path == "/-/reload":
            return self._reload(method, headers)
        known = (
            path in self.api
            or path in ("/", "/metrics", "/-/healthy", "/-/ready", "/runbook", "/report")
            or path.startswith(("/static/", "/report/static/"))
        )
        if known and method not in ("GET", "HEAD"):
            return text(405, f"{method} not allowed on {path}", Allow="GET, HEAD")
        if path in self.api:
            try:
                return self.api[path](query)
            except ValueError as exc:
                return api_error(400, "bad_data", str(exc))
        if path == "/metrics":
            return self._metrics(query, headers)
        if path == "/report" or path.startswith("/report/static/"):
            if self.report is None:
                return text(404, "no report: kvdoctor keeps no history here")
            part = path[len("/report/") :] if path != "/report" else ""
            status, body, content_type = self.report(part, query)
            if part and status == 200:
                return self._cached(
                    body, content_type, '"' + hashlib.sha256(body).hexdigest()[:20] + '"', headers
                )
            return Response(status, body, content_type)
        if path == "/-/healthy":
            return text(200, "kvdoctor is Healthy.")
        if path == "/-/ready":
            ready, why = self.state.readiness()
            return text(200 if ready else 503, why)
        if path == "/runbook":
            return self._runbook(headers)
        if path == "/" or path.startswith("/static/"):
            return self._file("index.html" if path == "/" else path[len("/static/") :], headers)
        if path.startswith("/api/"):
            return api_error(404, "not_found", f"no API endpoint {path}")
        return text(404, "404 page not found")

    def _metrics(self, query: dict[str, list[str]], headers: Mapping[str, str]) -> Response:
        encoder, content_type = choose_encoder(headers.get("Accept", ""))
        source: Any = _Only(self.registry, set(query["name[]"])) if "name[]" in query else self.registry
        return Response(200, encoder(source), content_type)

    def _targets(self, query: dict[str, list[str]]) -> Response:
        targets = self.state.snapshot().targets
        return json_response([targets[name].to_dict() for name in sorted(targets)])

    def _diagnoses(self, query: dict[str, list[str]]) -> Response:
        want = set(query.get("target", []))
        diagnoses = sorted(self.state.snapshot().diagnoses, key=lambda d: (d.target, d.model_name))
        return json_response([d.to_dict() for d in diagnoses if not want or d.target in want])

    def _signals(self, query: dict[str, list[str]]) -> Response:
        return json_response(
            {
                "signals": [s.to_dict() for s in SIGNALS.values()],
                "findings": [{**f.__dict__, "title": f.display_title()} for f in FINDINGS.values()],
            }
        )

    def _history(self, query: dict[str, list[str]]) -> Response:
        since = _float(query, "since")
        target, model = _one(query, "target"), _one(query, "model_name")
        if target is not None and model is not None:
            keys = [(target, model)]
        else:
            diagnoses = self.state.snapshot().diagnoses
            keys = sorted({(d.target, d.model_name) for d in diagnoses if target in (None, d.target)})
        series = []
        for t, m in keys:
            points = self.state.history(t, m)
            if since is not None:
                points = [p for p in points if p["t"] > since]
            series.append({"target": t, "model_name": m, "points": points})
        return json_response(series)

    def _status(self, query: dict[str, list[str]]) -> Response:
        snap = self.state.snapshot()
        targets = snap.targets.values()
        data: dict[str, Any] = {
            "version": __version__,
            "now": time.time(),
            "started": self.state.started_ts,
            "ready": snap.ready,
            "evaluation": {
                "ts": snap.evaluation_ts,
                "duration_s": snap.evaluation_duration_s,
                "rule_failures_total": snap.rule_failures_total,
                "rule_failures": snap.rule_failures,
            },
            "cycles": {
                "failed_in_a_row": snap.failed_cycles,
                "error": snap.cycle_error,
            },
            "reload": {
                "ok": snap.reload_ok,
                "ts": snap.reload_ts,
                "last_success_ts": snap.reload_success_ts,
                "error": snap.reload_error,
                "attempts": [r.to_json() for r in snap.reloads],
            },
            "cycle": {"duration_s": snap.cycle_duration_s, "interval_s": snap.interval_s},
            "scheduler_events": snap.scheduler_events,
            "targets": {"total": len(targets), "up": sum(1 for t in targets if t.up)},
            "storage": {**{k: f.to_json() for k, f in snap.storage.items()}, "problem": snap.storage_problem},
        }
        if self.notify_status is not None:
            try:
                notify = self.notify_status()
                if notify is not None:
                    data["notify"] = notify.to_json()
            except Exception:
                log.exception("the notify status failed")
                data["extra_status_error"] = "unavailable, see the daemon log"
        return json_response(data)

    def _reload(self, method: str, headers: Mapping[str, str]) -> Response:
        if method not in ("POST", "PUT"):
            return text(405, "Only POST or PUT requests allowed.", Allow="POST, PUT")
        # A browser on another site can send a simple POST here; refuse anything that says it is cross-origin.
        origin = headers.get("Origin")
        if headers.get("Sec-Fetch-Site") == "cross-site" or (
            origin and urlsplit(origin).netloc != headers.get("Host", "")
        ):
            return text(403, "cross-origin reload refused")
        if self.reload is None:
            return text(403, "reload is not enabled")
        with self._reload_lock:
            try:
                ok, message = self.reload()
            except Exception as exc:
                log.exception("reload failed")
                ok, message = False, f"{type(exc).__name__}: {exc}"
        if ok:
            return text(200, message or "reloaded")
        return text(500, f"failed to reload config: {message}")

    def _runbook(self, headers: Mapping[str, str]) -> Response:
        if self.rules is not None:
            groups = self.rules()
        else:
            if self._shipped is None:
                self._shipped = load_files(default_rule_files())
            groups = self._shipped
        data = render_runbook(groups).encode()
        return self._cached(data, TYPES[".html"], '"' + hashlib.sha256(data).hexdigest()[:20] + '"', headers)

    def _file(self, name: str, headers: Mapping[str, str]) -> Response:
        found = self.static.get(name)
        if found is None:
            return text(404, "404 page not found")
        return self._cached(*found, headers)

    def _cached(self, data: bytes, content_type: str, etag: str, headers: Mapping[str, str]) -> Response:
        cache = "no-cache"  # revalidate each load so an upgrade shows at once; the ETag makes that cheap
        if etag in (headers.get("If-None-Match") or ""):
            return Response(304, b"", content_type, {"ETag": etag}, cache)
        return Response(200, data, content_type, {"ETag": etag}, cache)


class _Only:
    """The families of a registry named in ?name[]= (by family or sample name)."""

    def __init__(self, registry: CollectorRegistry, names: set[str]) -> None:
        self.registry, self.names = registry, names

    def collect(self) -> Iterator[Metric]:
        """Families with a matching name."""
        for m in self.registry.collect():
            if m.name in self.names or any(s.name in self.names for s in m.samples):
                yield m


def _one(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[-1] if values else None


def _float(query: dict[str, list[str]], key: str) -> float | None:
    v = _one(query, key)
    if v is None:
        return None
    try:
        f = float(v)
    except ValueError:
        raise ValueError(f"{key}: not a number: {v!r}") from None
    if not math.isfinite(f):
        raise ValueError(f"{key}: not a finite number: {v!r}")
    return f
