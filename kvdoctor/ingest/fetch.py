"""Fetch one `/metrics` exposition over HTTP with hard limits on time and size (asyncio, one shared pool)."""

from __future__ import annotations

import functools
import re
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from kvdoctor.errors import TransportError
from kvdoctor.ingest.parse import is_openmetrics

if TYPE_CHECKING:  # imported where a scrape is made: a command that only reads recordings never loads it
    import aiohttp

ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
_OK_TYPES = ("text/plain", "application/openmetrics-text", "")
_CHUNK = 65536


class Page(NamedTuple):
    """A fetched exposition and its format, as the response's Content-Type names it."""

    text: str
    openmetrics: bool


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


@functools.lru_cache(maxsize=64)
def _ssl(verify: bool | str, cert: tuple[str, str] | None) -> ssl.SSLContext | bool:
    # Building a context reads the CA bundle: once per distinct setting, not once per scrape.
    if verify is False and cert is None:
        return False
    ctx = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
    if verify is False:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


def new_session(max_connections: int = 100) -> aiohttp.ClientSession:
    """A client session whose connection pool holds at most max_connections; call inside a running loop."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, ttl_dns_cache=60)
    return aiohttp.ClientSession(connector=connector, auto_decompress=True, trust_env=False)


async def fetch_async(session: aiohttp.ClientSession, url: str, opts: HttpOptions) -> str:
    """GET url within opts' limits and return the body as text; raise ScrapeError on any failure."""
    return (await fetch_page_async(session, url, opts)).text


async def fetch_page_async(session: aiohttp.ClientSession, url: str, opts: HttpOptions) -> Page:
    """GET url within opts' limits: the body as text and whether it is OpenMetrics; ScrapeError on any failure."""
    import aiohttp

    shown = _without_userinfo(url)  # errors reach logs, the API and the page: never user:password
    headers = {"Accept": ACCEPT, "Accept-Encoding": "gzip", **dict(opts.headers)}
    if opts.bearer_token:
        headers["Authorization"] = f"Bearer {opts.bearer_token}"
    auth = aiohttp.BasicAuth(*opts.basic_auth) if opts.basic_auth else None
    timeout = aiohttp.ClientTimeout(
        total=opts.total_timeout, sock_connect=opts.connect_timeout, sock_read=opts.read_timeout
    )
    try:
        sslopt = _ssl(opts.verify, opts.client_cert)
    except (OSError, ssl.SSLError) as exc:
        raise ScrapeError(f"{shown}: TLS settings unusable: {exc}") from None
    try:
        async with session.get(url, headers=headers, auth=auth, ssl=sslopt, timeout=timeout) as resp:
            if resp.status != 200:
                raise ScrapeError(f"{shown}: HTTP {resp.status} {resp.reason or ''}".rstrip())
            full_type = resp.headers.get("Content-Type", "")
            ctype = full_type.split(";")[0].strip().lower()
            if ctype not in _OK_TYPES:
                raise ScrapeError(f"{shown}: unexpected content type {ctype!r} (want text/plain)")
            declared = resp.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > opts.max_bytes:
                raise ScrapeError(
                    f"{shown}: body of {int(declared)} bytes exceeds the {opts.max_bytes}-byte limit"
                )
            body = bytearray()
            async for chunk in resp.content.iter_chunked(_CHUNK):  # decompressed: a gzip bomb stops here too
                body += chunk
                if len(body) > opts.max_bytes:
                    raise ScrapeError(f"{shown}: body exceeds the {opts.max_bytes}-byte limit")
    except ScrapeError:
        raise
    except aiohttp.ConnectionTimeoutError:
        raise ScrapeError(f"{shown}: connect timed out after {opts.connect_timeout:g}s") from None
    except aiohttp.SocketTimeoutError:
        raise ScrapeError(f"{shown}: read timed out after {opts.read_timeout:g}s") from None
    except TimeoutError:
        raise ScrapeError(f"{shown}: timed out after {opts.total_timeout:g}s") from None
    except aiohttp.ClientPayloadError:
        raise ScrapeError(
            f"{shown}: body truncated: the connection closed before the declared length"
        ) from None
    except (aiohttp.ClientSSLError, ssl.SSLError) as exc:
        raise ScrapeError(f"{shown}: TLS error: {_short(exc)}") from None
    except aiohttp.ClientConnectorError as exc:
        reason = "connection refused" if isinstance(exc.os_error, ConnectionRefusedError) else _short(exc)
        raise ScrapeError(f"{shown}: connection failed: {reason}") from None
    except aiohttp.InvalidURL:
        raise ScrapeError(f"{shown}: not a valid URL") from None
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise ScrapeError(f"{shown}: {type(exc).__name__}: {_short(exc)}") from None
    try:
        return Page(body.decode("utf-8"), is_openmetrics(full_type))
    except UnicodeDecodeError as exc:
        raise ScrapeError(f"{shown}: body is not UTF-8 text (byte {exc.start})") from None


async def _once(url: str, opts: HttpOptions) -> Page:
    async with new_session(1) as session:
        return await fetch_page_async(session, url, opts)


def fetch_page(url: str, opts: HttpOptions | None = None) -> Page:
    """GET url once from synchronous code (its own event loop and connection); raise ScrapeError on failure."""
    import asyncio  # only here: a command on a recording never fetches, and asyncio is a tenth of its start-up

    return asyncio.run(_once(url, opts or HttpOptions()))


def fetch(url: str, opts: HttpOptions | None = None) -> str:
    """The body of fetch_page(url, opts)."""
    return fetch_page(url, opts).text


def _without_userinfo(url: str) -> str:
    u = urlsplit(url)
    return urlunsplit(u._replace(netloc=u.netloc.rsplit("@", 1)[-1])) if "@" in u.netloc else url


def _short(exc: Exception) -> str:
    # aiohttp names the SSL context as "ssl:<ssl.SSLContext object at 0x…>": noise to an operator
    text = re.sub(r" ssl:(<[^>]*>|\S+)", "", str(exc)) or type(exc).__name__
    if "refused" in text.lower():
        return "connection refused"
    return text if len(text) <= 200 else text[:197] + "..."
