"""web-config.yml (exporter-toolkit format): validation, basic auth, TLS and client certificates, live reload."""

from __future__ import annotations

import http.client
import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import requests

from kvdoctor.status.exposition import make_registry
from kvdoctor.status.state import DaemonState
from kvdoctor.web import WebConfigError, WebServer, load_web_config
from kvdoctor.web.webconfig import WebConfigWatcher
from tests.support.pki import openssl, pki_fixture  # noqa: F401  (the `pki` fixture)

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def serve(web_config: str) -> WebServer:
    state = DaemonState()
    server = WebServer(state, make_registry(state), listen="127.0.0.1:0", web_config=web_config)
    server.start()
    return server


@pytest.fixture
def running() -> Iterator[list[WebServer]]:
    servers: list[WebServer] = []
    yield servers
    for s in servers:
        s.stop()


def test_every_error_at_once_with_file_and_key(tmp_path: Path) -> None:
    path = write(
        tmp_path / "web.yml",
        f"""
tls_server_config:
  cert_file: missing.pem
  client_auth_type: Sometimes
  min_version: TLS99
basic_auth_users:
  alice: plain-text-password
  bob: {HASH}
http_server_config:
  headers:
    X-Evil: "1"
    X-Frame-Options: allow
colour: blue
""",
    )
    with pytest.raises(WebConfigError) as exc:
        load_web_config(path)
    errors = exc.value.errors
    assert f"{path}:7: basic_auth_users.alice: not a bcrypt hash" in "\n".join(errors)
    # each error at file:line of its key (a missing key: the line of the section that lacks it)
    for line, key in (
        (3, "tls_server_config.cert_file"),
        (2, "tls_server_config.key_file"),
        (4, "tls_server_config.client_auth_type"),
        (5, "tls_server_config.min_version"),
        (11, "http_server_config.headers.X-Evil"),
        (12, "http_server_config.headers.X-Frame-Options"),
        (13, "colour"),
    ):
        assert any(e.startswith(f"{path}:{line}: {key}: ") for e in errors), (key, errors)
    assert not any("bob" in e for e in errors)


def test_http2_is_refused_by_name_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "web.yml", "http_server_config:\n  http2: true\n")
    with pytest.raises(WebConfigError) as exc:
        load_web_config(path)
    assert exc.value.errors == [
        f"{path}:2: http_server_config.http2: HTTP/2 is not supported: kvdoctor serves HTTP/1.1 (keep-alive); "
        "remove the key or set it to false"
    ]
    load_web_config(
        write(tmp_path / "off.yml", "http_server_config:\n  http2: false\n")
    )  # what it does anyway


def test_yaml_errors_name_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "web.yml", "basic_auth_users:\n  alice: [unclosed\n")
    with pytest.raises(WebConfigError, match=r"web.yml: line \d+: invalid YAML"):
        load_web_config(path)


def test_client_auth_rules(tmp_path: Path, pki: Path) -> None:
    base = f"tls_server_config:\n  cert_file: {pki}/server.pem\n  key_file: {pki}/server.key\n"
    cases = {
        "  client_auth_type: RequireAnyClientCert\n": "not supported by kvdoctor",
        "  client_auth_type: RequireAndVerifyClientCert\n": "needs client_ca_file",
        f"  client_ca_file: {pki}/ca.pem\n": "without a client_auth_type",
        "  client_allowed_sans: [x]\n": "requires client_auth_type RequireAndVerifyClientCert",
        "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n": "not supported by kvdoctor",
    }
    for extra, message in cases.items():
        with pytest.raises(WebConfigError, match=message):
            load_web_config(write(tmp_path / "web.yml", base + extra))


def test_empty_file_means_plain_http_without_auth(tmp_path: Path) -> None:
    cfg = load_web_config(write(tmp_path / "web.yml", ""))
    assert cfg.ssl_context is None and cfg.authorized(None)


def test_basic_auth_protects_every_path(tmp_path: Path, running: list[WebServer]) -> None:
    path = write(
        tmp_path / "web.yml",
        f"basic_auth_users:\n  alice: {HASH}\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n",
    )
    server = serve(path)
    running.append(server)
    for route in ("", "metrics", "api/v1/diagnoses", "-/healthy", "-/ready", "static/app.js"):
        r = requests.get(server.url + route, timeout=5)
        assert r.status_code == 401, route
        assert r.headers["WWW-Authenticate"].startswith("Basic ")
    assert requests.get(server.url + "-/healthy", auth=("alice", "wrong"), timeout=5).status_code == 401
    assert requests.get(server.url + "-/healthy", auth=("mallory", "s3cret"), timeout=5).status_code == 401
    ok = requests.get(server.url + "-/healthy", auth=("alice", "s3cret"), timeout=5)
    assert ok.status_code == 200 and ok.headers["X-Frame-Options"] == "deny"
    assert requests.get(server.url + "-/healthy", auth=("alice", "s3cret"), timeout=5).status_code == 200
    bad_header = requests.get(server.url, headers={"Authorization": "Basic !!!"}, timeout=5)
    assert bad_header.status_code == 401


def test_https_with_the_ca_and_plain_http_refused(
    tmp_path: Path, pki: Path, running: list[WebServer]
) -> None:
    path = write(
        tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n"
    )
    shutil.copy(pki / "server.pem", tmp_path)
    shutil.copy(pki / "server.key", tmp_path)  # relative paths resolve next to web.yml
    server = serve(path)
    running.append(server)
    assert server.url.startswith("https://127.0.0.1:")
    r = requests.get(server.url + "api/v1/targets", verify=str(pki / "ca.pem"), timeout=5)
    assert r.status_code == 200 and r.json()["status"] == "success"
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(server.url, timeout=5)
    with pytest.raises(requests.ConnectionError):
        requests.get(server.url.replace("https://", "http://"), timeout=5)


def test_a_tls_scrape_of_metrics_reuses_its_connection(
    tmp_path: Path, pki: Path, running: list[WebServer]
) -> None:
    path = write(
        tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n"
    )
    shutil.copy(pki / "server.pem", tmp_path)
    shutil.copy(pki / "server.key", tmp_path)
    server = serve(path)
    running.append(server)
    host, port = server.address
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=5)
    try:
        conn.request("GET", "/metrics")
        first = conn.getresponse()
        body = first.read()
        tls_socket = conn.sock
        assert first.status == 200 and first.getheader("Connection") == "keep-alive"
        assert b"process_resident_memory_bytes" in body and b"kvdoctor_build_info" in body
        conn.request("GET", "/metrics")  # http.client would open a new socket had the server closed this one
        second = conn.getresponse()
        assert second.status == 200 and second.read().startswith(b"# HELP")
        assert tls_socket is not None and conn.sock is tls_socket
    finally:
        conn.close()


def test_min_version_tls13(tmp_path: Path, pki: Path, running: list[WebServer]) -> None:
    path = write(
        tmp_path / "web.yml",
        f"tls_server_config:\n  cert_file: {pki}/server.pem\n  key_file: {pki}/server.key\n  min_version: TLS13\n",
    )
    server = serve(path)
    running.append(server)
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(server.address, timeout=5) as raw, pytest.raises(ssl.SSLError):
        ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    ok = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    with (
        socket.create_connection(server.address, timeout=5) as raw,
        ok.wrap_socket(raw, server_hostname="127.0.0.1") as s,
    ):
        assert s.version() == "TLSv1.3"


def test_client_certificates(tmp_path: Path, pki: Path, running: list[WebServer]) -> None:
    base = (
        f"tls_server_config:\n  cert_file: {pki}/server.pem\n  key_file: {pki}/server.key\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki}/ca.pem\n"
    )
    ca, client = str(pki / "ca.pem"), (str(pki / "client.pem"), str(pki / "client.key"))
    server = serve(write(tmp_path / "web.yml", base + "  client_allowed_sans: [prometheus.example]\n"))
    running.append(server)
    assert requests.get(server.url + "-/healthy", verify=ca, cert=client, timeout=5).status_code == 200
    with pytest.raises(requests.ConnectionError):
        requests.get(server.url + "-/healthy", verify=ca, timeout=5)
    other = serve(write(tmp_path / "web2.yml", base + "  client_allowed_sans: [someone.else]\n"))
    running.append(other)
    with pytest.raises(requests.ConnectionError):
        requests.get(other.url + "-/healthy", verify=ca, cert=client, timeout=5)


def test_inline_cert_and_key(tmp_path: Path, pki: Path) -> None:
    cert, key = (pki / "server.pem").read_text(), (pki / "server.key").read_text()
    indent = lambda s: "\n".join("    " + ln for ln in s.splitlines())  # noqa: E731
    path = write(
        tmp_path / "web.yml", f"tls_server_config:\n  cert: |\n{indent(cert)}\n  key: |\n{indent(key)}\n"
    )
    assert load_web_config(path).ssl_context is not None


def test_watcher_reloads_and_keeps_the_last_good(tmp_path: Path) -> None:
    path = write(tmp_path / "web.yml", f"basic_auth_users:\n  alice: {HASH}\n")
    watcher = WebConfigWatcher(path, check_every_s=0)
    assert set(watcher.get().users) == {"alice"}
    write(tmp_path / "web.yml", f"basic_auth_users:\n  alice: {HASH}\n  bob: {HASH}\n")
    assert set(watcher.get().users) == {"alice", "bob"}
    write(tmp_path / "web.yml", "basic_auth_users:\n  alice: nope\n")
    assert set(watcher.get().users) == {"alice", "bob"}
    assert "basic_auth_users.alice: not a bcrypt hash" in watcher.last_error


def test_a_bad_file_stops_the_server_from_starting(tmp_path: Path) -> None:
    state = DaemonState()
    with pytest.raises(WebConfigError):
        WebServer(state, make_registry(state), listen="127.0.0.1:0", web_config=str(tmp_path / "absent.yml"))
