"""A local stand-in for the Kubernetes API server's pods endpoints: list, and watch as chunked JSON events from a
resourceVersion, with 410 Gone for a compacted version and watch connections the test can drop.

It speaks what the official client reads (GET /api/v1/namespaces/NS/pods?labelSelector=…&watch=true&
resourceVersion=…&timeoutSeconds=…, bearer-token auth); nothing else of the API exists.
"""

from __future__ import annotations

import copy
import json
import socket
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml


def selects(selector: str, labels: dict[str, str]) -> bool:
    """Whether a label selector (k=v, k==v, k!=v, k, !k, comma-joined) matches labels."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            ok = labels.get(k) != v
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            ok = labels.get(k) == v
        elif term.startswith("!"):
            ok = term[1:] not in labels
        else:
            ok = term in labels
        if not ok:
            return False
    return True


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made with openssl (the certificate is its own CA)."""
    cert, key = directory / "apiserver.crt", directory / "apiserver.key"
    argv = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=stand-in -addext subjectAltName=IP:127.0.0.1"
    subprocess.run([*argv.split(), "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def make_pod(
    name: str,
    ip: str,
    *,
    namespace: str = "vllm",
    ready: bool = True,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    ports: dict[str, int] | None = None,
    args: list[str] | None = None,
) -> dict[str, Any]:
    """A pod as the API returns it: one container `vllm` with the given ports and command line."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.32.0",
                    "command": ["vllm", "serve"],
                    "args": args or [],
                    "ports": [
                        {"name": n, "containerPort": p, "protocol": "TCP"} for n, p in (ports or {}).items()
                    ],
                }
            ]
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


class KubeAPI:
    """The stand-in server; put()/delete() change pods (each a new resourceVersion, as etcd would)."""

    def __init__(self, token: str = "stand-in-token", tls: tuple[Path, Path] | None = None) -> None:
        self.token, self.tls = token, tls
        self._cond = threading.Condition()
        self._rv = 1000
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._events: list[tuple[int, str, dict[str, Any]]] = []
        self._compacted = 0  # watches from a resourceVersion below this get 410 Gone
        self._generation = 0  # drop_watches() bumps it: open watch connections are cut mid-stream
        self._closed = False
        self.lists = 0
        self.watches = 0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        if tls is not None:  # (certificate, key): HTTPS, as in-cluster clients always speak
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(str(tls[0]), str(tls[1]))
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}"

    def put(self, pod: dict[str, Any]) -> None:
        """Create or update a pod."""
        pod = copy.deepcopy(pod)
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        with self._cond:
            self._rv += 1
            pod["metadata"]["resourceVersion"] = str(self._rv)
            kind = "MODIFIED" if key in self._pods else "ADDED"
            self._pods[key] = pod
            self._events.append((self._rv, kind, pod))
            self._cond.notify_all()

    def delete(self, namespace: str, name: str) -> None:
        """Delete a pod."""
        with self._cond:
            pod = copy.deepcopy(self._pods.pop((namespace, name)))
            self._rv += 1
            pod["metadata"]["resourceVersion"] = str(self._rv)
            self._events.append((self._rv, "DELETED", pod))
            self._cond.notify_all()

    def compact(self) -> None:
        """Forget the event history, as etcd compaction does: a watch from an older version now gets 410."""
        with self._cond:
            self._compacted = self._rv + 1
            self._events.clear()

    def drop_watches(self) -> None:
        """Cut every open watch connection mid-stream (no final chunk), as a restarting API server would."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def kubeconfig(self, path: Path, namespace: str = "vllm") -> Path:
        """A kubeconfig pointing at this server with its bearer token."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "stand-in",
            "clusters": [{"name": "stand-in", "cluster": {"server": self.url}}],
            "users": [{"name": "kvdoctor", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "stand-in",
                    "context": {"cluster": "stand-in", "user": "kvdoctor", "namespace": namespace},
                }
            ],
        }
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        return path

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- what the handler calls ------------------------------------------------------------------------
    def list_pods(self, ns: str, selector: str) -> dict[str, Any]:
        with self._cond:
            self.lists += 1
            items = [
                p for (n, _), p in sorted(self._pods.items()) if n == ns and selects(selector, _labels(p))
            ]
            return {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": copy.deepcopy(items),
            }

    def stream(self, ns: str, selector: str, since: int, timeout_s: float, write: Any) -> bool:
        """Write the events after `since` and then new ones until the timeout; False when cut by drop_watches."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self.watches += 1
            gen = self._generation
            if since < self._compacted:
                write(
                    {
                        "type": "ERROR",
                        "object": {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "message": f"too old resource version: {since} ({self._compacted})",
                            "reason": "Expired",
                            "code": 410,
                        },
                    }
                )
                return True
        while True:
            with self._cond:
                pending = [(rv, k, p) for rv, k, p in self._events if rv > since]
                if not pending:
                    if gen != self._generation or self._closed:
                        return False
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return True
                    self._cond.wait(min(left, 1.0))
                    continue
            for rv, kind, pod in pending:
                since = rv
                if pod["metadata"]["namespace"] == ns and selects(selector, _labels(pod)):
                    write({"type": kind, "object": pod})


def _labels(pod: dict[str, Any]) -> dict[str, str]:
    return pod["metadata"].get("labels") or {}


def _handler(api: KubeAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            q = {k: v[-1] for k, v in parse_qs(url.query).items()}
            parts = url.path.strip("/").split("/")
            scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
            if scheme.lower() != "bearer" or token != api.token:  # the scheme is case-insensitive (RFC 9110)
                return self._json(
                    401, {"kind": "Status", "status": "Failure", "reason": "Unauthorized", "code": 401}
                )
            if (
                len(parts) != 5
                or parts[:2] != ["api", "v1"]
                or parts[2] != "namespaces"
                or parts[4] != "pods"
            ):
                return self._json(
                    404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
                )
            ns, selector = parts[3], q.get("labelSelector", "")
            if q.get("watch", "").lower() not in ("true", "1"):
                return self._json(200, api.list_pods(ns, selector))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            write = lambda ev: self._chunk((json.dumps(ev) + "\n").encode())  # noqa: E731
            try:
                ended = api.stream(
                    ns,
                    selector,
                    int(q.get("resourceVersion") or 0),
                    float(q.get("timeoutSeconds") or 300),
                    write,
                )
                if ended:
                    self._chunk(b"")
                else:  # cut mid-stream: no terminating chunk, the client sees a broken response
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
            except (BrokenPipeError, ConnectionResetError, OSError):
                self.close_connection = True

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _json(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
