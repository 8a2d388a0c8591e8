"""HTTP/1.x framing: one request head read from an asyncio stream, strictly and within bounds; keep-alive."""

from __future__ import annotations

import asyncio
import http.client
import io
from typing import NamedTuple

from kvdoctor.errors import KvdoctorError

MAX_HEADER_BYTES = 16 * 1024
MAX_HEADERS = 100
REASONS = {408: "Request Timeout", 413: "Content Too Large", 431: "Request Header Fields Too Large"}


class Refused(KvdoctorError):
    """A request answered with an error before it reached the app."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Head(NamedTuple):
    """A request line and its headers."""

    method: str
    target: str
    version: str  # HTTP/1.0 or HTTP/1.1 (any later 1.x is answered as 1.1)
    headers: http.client.HTTPMessage


def status_line(status: int, version: str = "HTTP/1.1") -> str:
    """`HTTP/1.x <status> <reason>` with its line end; a 1.0 request is answered in 1.0, as Go's net/http does."""
    version = "HTTP/1.0" if version == "HTTP/1.0" else "HTTP/1.1"
    return f"{version} {status} {http.client.responses.get(status) or REASONS.get(status, '')}\r\n"


def keep_alive(head: Head) -> bool:
    """Whether the client lets the connection stay open: HTTP/1.1 unless `close`, 1.0 only with `keep-alive`."""
    tokens = {t.strip().lower() for t in (head.headers.get("Connection") or "").split(",")}
    if "close" in tokens:
        return False
    return head.version != "HTTP/1.0" or "keep-alive" in tokens


async def read_head(reader: asyncio.StreamReader, first: bytes = b"") -> Head:
    """The request line (after `first`, its bytes already read) and headers; raises Refused for anything
    malformed or oversized."""
    try:
        line = first + await reader.readline()
        if line in (b"\r\n", b"\n"):  # RFC 9112 2.2: a stray CRLF after a previous body is ignored
            line = await reader.readline()
    except (asyncio.LimitOverrunError, ValueError):
        raise Refused(431, "request line too long") from None
    if not line:
        raise asyncio.IncompleteReadError(b"", None)
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
        raise Refused(400, "bad request line")
    raw = bytearray()
    for _ in range(MAX_HEADERS + 1):
        try:
            h = await reader.readline()
        except (asyncio.LimitOverrunError, ValueError):
            raise Refused(431, "request header too long") from None
        if not h:
            raise asyncio.IncompleteReadError(bytes(raw), None)
        if h in (b"\r\n", b"\n"):
            break
        raw += h
        if len(raw) > MAX_HEADER_BYTES:
            raise Refused(431, "request headers too large")
    else:
        raise Refused(431, f"more than {MAX_HEADERS} request headers")
    try:
        headers = http.client.parse_headers(io.BytesIO(bytes(raw) + b"\r\n"))
    except http.client.HTTPException:
        raise Refused(400, "malformed request headers") from None
    return Head(parts[0], parts[1], parts[2], headers)
