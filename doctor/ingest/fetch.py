"""Fetch one `/metrics` exposition over HTTP with hard limits on time and size."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import requests

from doctor.errors import TransportError

ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
_OK_TYPES = ("text/plain", "application/openmetrics-text", "")


class ScrapeError(TransportError):
    """A failed scrape; the message names the target and what went wrong (never a credential)."""


@dataclass(frozen=True)
class HttpOptions:
    """How to reach a target: timeouts, size cap, auth and TLS."""

    connect_timeout: float = 3.0
    read_timeout: float = 10.0
    total_timeout: float = (
        10.0  # a server dripping bytes never trips the read timeout; this bounds the whole fetch
    )
    max_bytes: int = 16 * 1024 * 1024
    bearer_token: str | None = None
    basic_auth: tuple[str, str] | None = None
    verify: bool | str = True  # False, True or a CA bundle path
    client_cert: tuple[str, str] | None = None
    headers: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:  # keep credentials out of logs
        return f"HttpOptions(timeout={self.total_timeout}s, max_bytes={self.max_bytes})"


def fetch(url: str, opts: HttpOptions | None = None, session: requests.Session | None = None) -> str:
    """GET url and return the body as text; raise ScrapeError on any failure."""
    opts = opts or HttpOptions()
    headers = {"Accept": ACCEPT, "Accept-Encoding": "gzip", **dict(opts.headers)}
    if opts.bearer_token:
        headers["Authorization"] = f"Bearer {opts.bearer_token}"
    getter = session.get if session is not None else requests.get
    deadline = time.monotonic() + opts.total_timeout
    try:
        with getter(
            url,
            headers=headers,
            auth=opts.basic_auth,
            verify=opts.verify,
            cert=opts.client_cert,
            timeout=(opts.connect_timeout, min(opts.read_timeout, opts.total_timeout)),
            stream=True,
            allow_redirects=True,
        ) as resp:
            if resp.status_code != 200:
                raise ScrapeError(f"{url}: HTTP {resp.status_code} {resp.reason or ''}".rstrip())
            ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if ctype not in _OK_TYPES:
                raise ScrapeError(f"{url}: unexpected content type {ctype!r} (want text/plain)")
            declared = resp.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > opts.max_bytes:
                raise ScrapeError(
                    f"{url}: body of {int(declared)} bytes exceeds the {opts.max_bytes}-byte limit"
                )
            # A server dripping bytes resets the read timeout with every byte; close the socket at the deadline.
            timer = threading.Timer(max(0.0, deadline - time.monotonic()), _abort, (resp,))
            timer.daemon = True
            timer.start()
            chunks: list[bytes] = []
            size = 0
            try:
                for chunk in resp.iter_content(chunk_size=65536):
                    size += len(chunk)
                    if size > opts.max_bytes:
                        raise ScrapeError(f"{url}: body exceeds the {opts.max_bytes}-byte limit")
                    chunks.append(chunk)
            except (requests.exceptions.RequestException, AttributeError, ValueError, OSError):
                if time.monotonic() >= deadline:
                    raise ScrapeError(
                        f"{url}: timed out after {opts.total_timeout:g}s (body still arriving)"
                    ) from None
                raise
            finally:
                timer.cancel()
            if time.monotonic() >= deadline:  # the timer cut the body short: never parse half an exposition
                raise ScrapeError(f"{url}: timed out after {opts.total_timeout:g}s (body still arriving)")
            body = b"".join(chunks)
    except ScrapeError:
        raise
    except requests.exceptions.ConnectTimeout:
        raise ScrapeError(f"{url}: connect timed out after {opts.connect_timeout:g}s") from None
    except requests.exceptions.ReadTimeout:
        raise ScrapeError(f"{url}: read timed out after {opts.read_timeout:g}s") from None
    except requests.exceptions.ChunkedEncodingError:
        raise ScrapeError(
            f"{url}: body truncated: the connection closed before the declared length"
        ) from None
    except requests.exceptions.SSLError as exc:
        raise ScrapeError(f"{url}: TLS error: {_short(exc)}") from None
    except requests.exceptions.ConnectionError as exc:
        raise ScrapeError(f"{url}: connection failed: {_short(exc)}") from None
    except requests.exceptions.RequestException as exc:
        raise ScrapeError(f"{url}: {type(exc).__name__}: {_short(exc)}") from None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError(f"{url}: body is not UTF-8 text (byte {exc.start})") from None


def _abort(resp: requests.Response) -> None:
    """Shut the socket down from another thread: this wakes a blocked read, where close() would not."""
    try:
        resp.raw.shutdown()
    except (AttributeError, OSError):
        resp.close()


def _short(exc: Exception) -> str:
    text = str(exc)
    if "refused" in text.lower():
        return "connection refused"
    return text if len(text) <= 200 else text[:197] + "..."
