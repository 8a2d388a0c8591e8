"""A response as bytes on the wire: the security and caching headers, gzip when the client takes it, keep-alive."""

from __future__ import annotations

import email.utils
import gzip
from collections.abc import Mapping
from urllib.parse import urlsplit

from prometheus_client.exposition import gzip_accepted

from kvdoctor import __version__
from kvdoctor.web.request import Head, status_line
from kvdoctor.web.responses import Response

GZIP_MIN_BYTES = 1024
DEFAULT_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'",
}


def frame(resp: Response, head: Head, configured: Mapping[str, str], keep_idle_s: float | None) -> bytes:
    """Status line, headers and (unless HEAD or 304) body; keep_idle_s is None when the connection closes after."""
    body = resp.body
    out = {**DEFAULT_HEADERS, **configured, **resp.headers}
    if resp.status != 304:
        out["Content-Type"] = resp.content_type
        if len(body) >= GZIP_MIN_BYTES or urlsplit(head.target).path == "/metrics":
            out["Vary"] = "Accept-Encoding"
            if gzip_accepted(head.headers.get("Accept-Encoding", "")):
                body = gzip.compress(body, compresslevel=6)
                out["Content-Encoding"] = "gzip"
    out["Cache-Control"] = resp.cache
    out["Content-Length"] = str(len(body))
    out["Server"] = f"kvdoctor/{__version__}"
    out["Date"] = email.utils.formatdate(usegmt=True)
    out["Connection"] = "close" if keep_idle_s is None else "keep-alive"
    if keep_idle_s is not None:
        out["Keep-Alive"] = f"timeout={keep_idle_s:g}"
    lines = status_line(resp.status, head.version) + "".join(f"{k}: {v}\r\n" for k, v in out.items())
    wire = (lines + "\r\n").encode("latin-1")
    return wire if head.method == "HEAD" or resp.status == 304 else wire + body
