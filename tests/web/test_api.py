"""The web server's routes over real HTTP, with real diagnoses from replayed vLLM recordings."""

from __future__ import annotations

import gzip
import shutil
import socket
import subprocess
from collections.abc import Iterator

import pytest
import requests

from kvdoctor.status.exposition import make_registry
from kvdoctor.status.health import NotifyStatus, OutboxStats
from kvdoctor.status.state import DaemonState
from kvdoctor.web import WebServer
from kvdoctor.web.server import parse_listen
from tests.web_support import DOWN, DOWN_ERROR, RECORDINGS, build_state

needs_recordings = pytest.mark.skipif(not RECORDINGS.exists(), reason="shared vLLM recordings not present")


def serve(state: DaemonState, **kw) -> WebServer:  # type: ignore[no-untyped-def]
    server = WebServer(state, make_registry(state), listen="127.0.0.1:0", **kw)
    server.start()
    return server


@pytest.fixture(scope="module")
def live() -> Iterator[str]:
    if not RECORDINGS.exists():
        pytest.skip("shared vLLM recordings not present")
    server = serve(build_state())
    yield server.url
    server.stop()


@pytest.fixture
def empty() -> Iterator[tuple[WebServer, DaemonState]]:
    state = DaemonState()
    server = serve(state)
    yield server, state
    server.stop()


@needs_recordings
def test_diagnoses_are_the_replayed_verdicts(live: str) -> None:
    r = requests.get(live + "api/v1/diagnoses", timeout=5)
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    body = r.json()
    assert body["status"] == "success"
    by_target = {d["target"]: d for d in body["data"]}
    assert by_target["kv_bound"]["bottleneck"] == "kv_cache"
    assert by_target["batch_cap"]["bottleneck"] == "batch_cap"
    assert by_target["healthy"]["bottleneck"] == "healthy"
    assert by_target[DOWN]["bottleneck"] == "unknown"
    kv = by_target["kv_bound"]
    assert "--kv-cache-dtype" in [a["flag"] for a in kv["advice"]]
    assert kv["evidence"]["kv_usage_max_1m"] >= 0.9
    assert kv["since"] <= kv["t"]
    assert {f["name"] for f in kv["findings"]} >= {"kv_cache"}
    assert "--max-num-seqs" in [a["flag"] for a in by_target["batch_cap"]["advice"]]


@needs_recordings
def test_diagnoses_filter_by_target(live: str) -> None:
    data = requests.get(live + "api/v1/diagnoses", params={"target": "batch_cap"}, timeout=5).json()["data"]
    assert [d["target"] for d in data] == ["batch_cap"]
    assert requests.get(live + "api/v1/diagnoses?target=nope", timeout=5).json()["data"] == []


@needs_recordings
def test_targets_list_scrape_health(live: str) -> None:
    data = requests.get(live + "api/v1/targets", timeout=5).json()["data"]
    by_name = {t["name"]: t for t in data}
    assert by_name[DOWN]["up"] is False and by_name[DOWN]["last_error"] == DOWN_ERROR
    assert by_name["kv_bound"]["up"] is True
    assert [t["name"] for t in data] == sorted(by_name)


@needs_recordings
def test_history_points_per_target_and_since(live: str) -> None:
    one = requests.get(
        live + "api/v1/history", params={"target": "kv_bound", "model_name": "tiny"}, timeout=5
    )
    series = one.json()["data"]
    assert [(s["target"], s["model_name"]) for s in series] == [("kv_bound", "tiny")]
    points = series[0]["points"]
    assert len(points) >= 5 and all("t" in p for p in points)
    assert max(p["kv_usage"] for p in points if "kv_usage" in p) > 0.9
    newer = requests.get(live + "api/v1/history", params={"since": points[-2]["t"]}, timeout=5).json()["data"]
    kv = next(s for s in newer if s["target"] == "kv_bound")
    assert kv["points"] == points[-1:]
    everything = requests.get(live + "api/v1/history", timeout=5).json()["data"]
    assert {s["target"] for s in everything} == {"kv_bound", "batch_cap", "healthy", DOWN}
    bad = requests.get(live + "api/v1/history?since=soon", timeout=5)
    assert bad.status_code == 400 and bad.json()["errorType"] == "bad_data"


def test_status_includes_reload_and_extra(empty: tuple[WebServer, DaemonState]) -> None:
    state = DaemonState()
    state.note_reload(False, 100.0, "rules.yml:3: bad expr")
    state.count_event("missed")
    stats = OutboxStats(1, 2, 0, 0, "", 0, 0, 0, "", None)
    notify = NotifyStatus("bot", ("http://am.example:9093",), stats, ("target=a@100",), "")
    server = serve(state, notify_status=lambda: notify)
    try:
        data = requests.get(server.url + "api/v1/status", timeout=5).json()["data"]
    finally:
        server.stop()
    # a failed attempt has its time too; the last success is separate
    assert data["reload"] == {
        "ok": False,
        "ts": 100.0,
        "last_success_ts": None,
        "error": "rules.yml:3: bad expr",
        "attempts": [{"ts": 100.0, "ok": False, "message": "rules.yml:3: bad expr"}],
    }
    assert data["scheduler_events"] == {"missed": 1}
    assert data["notify"] == {
        "slack": "bot",
        "alertmanager": ["http://am.example:9093"],
        "outbox": {
            "pending": 1,
            "done": 2,
            "dead": 0,
            "quarantined": 0,
            "last_error": "",
            "unsaved": 0,
            "write_failures_total": 0,
            "quarantined_total": 0,
            "write_error": "",
            "failing_since": None,
        },
        "open_incidents": ["target=a@100"],
        "alertmanager_last_error": "",
    }
    assert data["ready"] is False and data["evaluation"]["ts"] is None


def test_status_survives_a_failing_extra() -> None:
    def broken() -> NotifyStatus:
        raise RuntimeError("secret-token-xyz leaked?")

    server = serve(DaemonState(), notify_status=broken)
    try:
        r = requests.get(server.url + "api/v1/status", timeout=5)
    finally:
        server.stop()
    assert r.status_code == 200 and "secret-token-xyz" not in r.text


def test_healthy_and_ready(empty: tuple[WebServer, DaemonState]) -> None:
    server, state = empty
    assert requests.get(server.url + "-/healthy", timeout=5).status_code == 200
    assert requests.get(server.url + "-/ready", timeout=5).status_code == 503
    state.publish([], 1000.0, 0.01, 0)
    assert requests.get(server.url + "-/ready", timeout=5).status_code == 200


def test_reload_semantics() -> None:
    calls: list[int] = []

    def reload() -> tuple[bool, str]:
        calls.append(1)
        return (len(calls) == 1, "" if len(calls) == 1 else "config.yml:7: targets[2].url: not a URL")

    server = serve(DaemonState(), reload=reload)
    try:
        assert requests.post(server.url + "-/reload", timeout=5).status_code == 200
        bad = requests.put(server.url + "-/reload", timeout=5)
        assert bad.status_code == 500 and "config.yml:7: targets[2].url: not a URL" in bad.text
        get = requests.get(server.url + "-/reload", timeout=5)
        assert get.status_code == 405 and "POST" in get.headers["Allow"]
        cross = requests.post(server.url + "-/reload", headers={"Origin": "http://evil.example"}, timeout=5)
        assert cross.status_code == 403
        assert len(calls) == 2
    finally:
        server.stop()


def test_reload_exception_is_500_without_traceback() -> None:
    def reload() -> tuple[bool, str]:
        raise OSError("rules dir vanished")

    server = serve(DaemonState(), reload=reload)
    try:
        r = requests.post(server.url + "-/reload", timeout=5)
    finally:
        server.stop()
    assert r.status_code == 500 and "rules dir vanished" in r.text and "Traceback" not in r.text


def test_reload_disabled_without_callback(empty: tuple[WebServer, DaemonState]) -> None:
    assert requests.post(empty[0].url + "-/reload", timeout=5).status_code == 403


def test_errors_headers_and_unknown_paths(empty: tuple[WebServer, DaemonState]) -> None:
    url = empty[0].url
    api = requests.get(url + "api/v1/nope", timeout=5)
    assert api.status_code == 404 and api.json()["status"] == "error"
    assert requests.get(url + "nope", timeout=5).status_code == 404
    assert requests.get(url + "static/../server.py", timeout=5).status_code == 404
    assert requests.delete(url + "api/v1/targets", timeout=5).status_code == 405
    for path in ("", "api/v1/targets", "metrics", "static/app.js", "-/healthy", "nope"):
        r = requests.get(url + path, timeout=5)
        assert r.headers["X-Content-Type-Options"] == "nosniff", path
        assert r.headers["Cache-Control"] in ("no-store", "no-cache"), path
        assert r.headers["Content-Type"], path


def test_internal_error_is_a_json_500_without_traceback(empty: tuple[WebServer, DaemonState]) -> None:
    server, _ = empty

    def boom(query):  # type: ignore[no-untyped-def]
        raise KeyError("internal detail")

    server.app.api["/api/v1/targets"] = boom
    r = requests.get(server.url + "api/v1/targets", timeout=5)
    assert r.status_code == 500 and r.json()["errorType"] == "internal"
    assert "internal detail" not in r.text and "Traceback" not in r.text


def test_malformed_request_line_gets_plain_error(empty: tuple[WebServer, DaemonState]) -> None:
    host, port = empty[0].address
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"GARBAGE\r\n\r\n")
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 400") and b"nosniff" in reply and b"<html" not in reply.lower()


def test_static_page_and_etag(empty: tuple[WebServer, DaemonState]) -> None:
    url = empty[0].url
    page = requests.get(url, timeout=5)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    head = page.text.split("<body>")[0]
    assert "static/app.js" in head and "http:" not in head and "https:" not in head  # nothing from a CDN
    js = requests.get(url + "static/app.js", timeout=5)
    assert js.headers["Content-Type"].startswith("text/javascript")
    again = requests.get(url + "static/app.js", headers={"If-None-Match": js.headers["ETag"]}, timeout=5)
    assert again.status_code == 304 and again.content == b""


@needs_recordings
def test_metrics_gzip_and_promtool(live: str) -> None:
    plain = requests.get(live + "metrics", headers={"Accept-Encoding": "identity"}, timeout=5)
    assert plain.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "Content-Encoding" not in plain.headers
    raw = requests.get(live + "metrics", headers={"Accept-Encoding": "gzip"}, stream=True, timeout=5)
    assert raw.headers["Content-Encoding"] == "gzip"
    text = gzip.decompress(raw.raw.read()).decode()
    assert 'kvdoctor_bottleneck{bottleneck="kv_cache",model_name="tiny",target="kv_bound"} 1.0' in text
    assert f'kvdoctor_target_up{{target="{DOWN}"}} 0.0' in text
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed")
    check = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stdout + check.stderr


@needs_recordings
def test_metrics_name_filter(live: str) -> None:
    text = requests.get(live + "metrics", params={"name[]": "kvdoctor_target_up"}, timeout=5).text
    assert "kvdoctor_target_up" in text and "kvdoctor_bottleneck" not in text


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9860") == ("127.0.0.1", 9860)
    assert parse_listen(":9860") == ("0.0.0.0", 9860)
    assert parse_listen("[::1]:0") == ("::1", 0)
    with pytest.raises(ValueError):
        parse_listen("localhost")


def test_stop_releases_the_port() -> None:
    server = serve(DaemonState())
    host, port = server.address
    server.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://{host}:{port}/-/healthy", timeout=2)
