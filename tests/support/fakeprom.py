"""A stand-in Prometheus HTTP API for the source tests: the `fake` fixture, and a fleet's answer."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest

from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.sources.prometheus import QUERIES

Answer = Callable[
    [str, dict[str, str]], tuple[int, Any]
]  # (expr, headers) -> (status, JSON body or raw bytes)


class FakePrometheus:
    """Answers POST /api/v1/query with whatever `answer` returns; records requests."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[tuple[str, dict[str, str]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(n).decode()).items()}
                headers = dict(self.headers.items())
                fake.requests.append((form.get("query", ""), headers))
                status, body = fake.answer(form.get("query", ""), headers)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        """Base URL."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        """Shut down."""
        self.httpd.shutdown()
        self.httpd.server_close()


def vector(*elems: tuple[dict[str, str], float]) -> dict[str, Any]:
    """A successful instant-vector answer."""
    result = [{"metric": m, "value": [1.0, str(v)]} for m, v in elems]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


@pytest.fixture(name="fake")
def fake_fixture() -> Iterator[Callable[[Answer], FakePrometheus]]:
    servers: list[FakePrometheus] = []

    def make(answer: Answer) -> FakePrometheus:
        servers.append(FakePrometheus(answer))
        return servers[-1]

    yield make
    for s in servers:
        s.stop()


GROUPS = load_files(default_rule_files())
KV_ALERT = next(r for g in GROUPS for r in g.rules if r.name == "VLLMKVCacheBound")
SIGNALS = {
    "kvdoctor:kv_usage:ratio": 0.97,
    "kvdoctor:kv_usage:max1m": 0.99,
    "kvdoctor:kv_usage:max30s": 0.99,
    "kvdoctor:running:avg1m": 6,
    "kvdoctor:running:max1m": 6,
    "kvdoctor:waiting:avg1m": 9,
    "kvdoctor:preemptions:rate1m": 0.3,
    "kvdoctor:generation_tokens:rate1m": 50,
}
HEALTHY = {
    "kvdoctor:running:avg1m": 2,
    "kvdoctor:running:max1m": 3,
    "kvdoctor:waiting:avg1m": 0,
    "kvdoctor:generation_tokens:rate1m": 40,
    "kvdoctor:kv_usage:max1m": 0.1,
    "kvdoctor:window:ready": 4,
}


def fleet_answer(n: int) -> Answer:
    """A fleet of n targets: t0 KV-bound, t1 down, the rest healthy."""
    names = [f"10.0.0.{i}:8000" for i in range(n)]

    def labels(i: int, **extra: str) -> dict[str, str]:
        return {"job": "vllm", "instance": names[i], **extra}

    def answer(q: str, _h: dict[str, str]) -> tuple[int, Any]:
        if q == QUERIES["targets"]:
            ups = [(labels(i, __name__="up"), 0 if i == 1 else 1) for i in range(n)]
            return 200, vector(*ups, (labels(0, __name__="scrape_duration_seconds"), 0.02))
        if q == QUERIES["signals"]:
            out = [({**labels(0, model_name="m"), "__name__": k}, v) for k, v in SIGNALS.items()]
            out += [
                ({**labels(i, model_name="m"), "__name__": k}, v)
                for i in range(2, n)
                for k, v in HEALTHY.items()
            ]
            return 200, vector(
                *out,
                ({**labels(0, model_name="m"), "__name__": "kvdoctor:ttft_seconds:p95_1m"}, float("nan")),
            )
        if q == QUERIES["capacity"]:
            info = {
                "__name__": "vllm:cache_config_info",
                **labels(0),
                "engine": "0",
                "num_gpu_blocks": "100",
                "block_size": "16",
            }
            return 200, vector((info, 1))
        if q == QUERIES["present"]:
            return 200, vector(({"__name__": "vllm:num_requests_running", "instance": names[0]}, 1))
        if q == KV_ALERT.expr:
            return 200, vector(({"__name__": "kvdoctor:kv_usage:max30s", **labels(0, model_name="m")}, 0.99))
        return 200, vector()

    return answer
