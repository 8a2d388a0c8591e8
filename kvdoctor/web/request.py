"""Reading one HTTP/1.x request head from an asyncio stream, strictly and within bounds."""

from __future__ import annotations

import asyncio
import http.client
import io

from kvdoctor.errors import KvdoctorError

MAX_HEADER_BYTES = 16 * 1024
MAX_HEADERS = 100
REASONS = {408: "Request Timeout", 413: "Content Too Large", 431: "Request Header Fields Too Large"}


class Refused(KvdoctorError):
    """A request answered with an error before it reached the app."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def status_line(status: int) -> str:
    """`HTTP/1.0 <status> <reason>` with its line end (kvdoctor answers one request per connection)."""
    return f"HTTP/1.0 {status} {http.client.responses.get(status) or REASONS.get(status, '')}\r\n"


async def read_head(reader: asyncio.StreamReader) -> tuple[str, str, http.client.HTTPMessage]:
    """The request line and headers; raises Refused for anything malformed or oversized."""
    try:
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
    return parts[0], parts[1], headers
