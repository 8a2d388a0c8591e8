"""What a route answers: a status, a body and its headers, and the Prometheus-style JSON envelope around data."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.sanity import scrub

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


@dataclass
class Response:
    """What to send: status, body, content type, extra headers and the Cache-Control policy."""

    status: int
    body: bytes = b""
    content_type: str = TEXT
    headers: dict[str, str] = field(default_factory=dict)
    cache: str = "no-store"


def json_response(data: Any, status: int = 200) -> Response:
    """A Prometheus-style JSON envelope around data."""
    body = {"status": "success", "data": data} if status < 400 else data
    return Response(status, json.dumps(scrub(body), separators=(",", ":"), allow_nan=False).encode(), JSON)


def api_error(status: int, kind: str, message: str) -> Response:
    """A Prometheus-style JSON error."""
    return json_response({"status": "error", "errorType": kind, "error": message}, status)


def text(status: int, message: str, **headers: str) -> Response:
    """A short plain-text response."""
    return Response(status, (message + "\n").encode(), TEXT, dict(headers))
