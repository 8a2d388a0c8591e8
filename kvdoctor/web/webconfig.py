"""The Prometheus exporter-toolkit web-config.yml: TLS, basic auth (bcrypt) and extra response headers."""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

from kvdoctor.config.yamlpos import Problems, broken_line, locate
from kvdoctor.errors import ValidationError
from kvdoctor.web.tlsconfig import parse_tls

log = logging.getLogger(__name__)

BCRYPT_RE = re.compile(r"^\$2[abxy]?\$\d{2}\$[./A-Za-z0-9]{53}$")
# The headers exporter-toolkit lets an operator set, with their allowed values (None: any).
HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}
TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
HTTP_KEYS = ("http2", "headers")
# Unknown users are checked against this too, so response time does not reveal which usernames exist.
_DUMMY_HASH = b"$2b$10$FjG9fPrH/qKAVkA.02aOsOdlTddJgvJ2gF.uOxThD9jhKQybOHI86"
_CACHE_MAX = 1024


class WebConfigError(ValidationError):
    """Every problem found in a web config file, one per line."""


@dataclass
class WebConfig:
    """A validated web config: the TLS context (or None for plain HTTP), users and headers."""

    path: str
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    ssl_context: ssl.SSLContext | None = None
    allowed_sans: list[str] = field(default_factory=list)
    files: tuple[str, ...] = ()
    _ok: set[bytes] = field(default_factory=set, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def authorized(self, header: str | None) -> bool:
        """True when no users are configured or the Authorization header carries valid credentials."""
        if not self.users:
            return True
        user, password = _basic(header)
        if user is None or password is None:
            return False
        hashed = self.users.get(user)
        key = hashlib.sha256(b"\0".join((user.encode(), password.encode(), hashed or b""))).digest()
        with self._lock:
            if hashed is not None and key in self._ok:
                return True
        try:
            ok = bcrypt.checkpw(password.encode(), hashed or _DUMMY_HASH) and hashed is not None
        except ValueError:
            ok = False
        if ok:
            with self._lock:
                if len(self._ok) >= _CACHE_MAX:
                    self._ok.clear()
                self._ok.add(key)
        return ok

    def peer_allowed(self, cert: dict[str, Any] | None) -> bool:
        """True when client_allowed_sans is unset or the verified client certificate names one of them."""
        if not self.allowed_sans:
            return True
        sans = [value for _, value in (cert or {}).get("subjectAltName", ())]
        return any(s in self.allowed_sans for s in sans)


def _basic(header: str | None) -> tuple[str | None, str | None]:
    if not header or header[:6].lower() != "basic ":
        return None, None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None, None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else (None, None)


def load_web_config(path: str) -> WebConfig:
    """Read and validate a web-config.yml; raises WebConfigError listing every problem at once."""
    try:
        located = locate(Path(path).read_text(encoding="utf-8"), path)
        raw = located.value
    except OSError as exc:
        raise WebConfigError([f"{path}: {exc.strerror or exc}"]) from None
    except yaml.YAMLError as exc:
        line, what = broken_line(exc)
        where = f" line {line}:" if line else ""
        raise WebConfigError([f"{path}:{where} invalid YAML: {what}"]) from None
    problems = Problems(located)

    def err(key: str, msg: str) -> None:
        problems.at(tuple(key.split(".")), msg)

    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise WebConfigError([f"{path}: expected a mapping at the top level"])
    for k in raw:
        if k not in TOP_KEYS:
            err(str(k), f"unknown key (expected one of {', '.join(TOP_KEYS)})")
    if raw.get("rate_limit"):
        err("rate_limit", "not supported by kvdoctor; put a reverse proxy in front to rate-limit")
    cfg = WebConfig(path, users=_users(raw.get("basic_auth_users"), err), headers=_headers(raw, err))
    tls = parse_tls(raw.get("tls_server_config"), Path(path).resolve().parent, err)
    if tls is not None:
        cfg.ssl_context, cfg.allowed_sans, cfg.files = tls
    if problems:
        raise WebConfigError(problems.lines)
    cfg.files = (str(Path(path).resolve()), *cfg.files)
    return cfg


def _users(raw: Any, err: Callable[[str, str], None]) -> dict[str, bytes]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        err("basic_auth_users", "must be a mapping of username to bcrypt hash")
        return {}
    users = {}
    for user, hashed in raw.items():
        if not isinstance(user, str) or not user or ":" in user:
            err(f"basic_auth_users.{user}", "username must be a non-empty string without ':'")
        elif not isinstance(hashed, str) or not BCRYPT_RE.match(hashed):
            err(
                f"basic_auth_users.{user}",
                "not a bcrypt hash (make one with `htpasswd -nBC 10 '' | tr -d ':'`)",
            )
        else:
            users[user] = hashed.encode()
    return users


def _headers(raw: dict[str, Any], err: Callable[[str, str], None]) -> dict[str, str]:
    http = raw.get("http_server_config")
    if http is None:
        return {}
    if not isinstance(http, dict):
        err("http_server_config", "must be a mapping")
        return {}
    for k in http:
        if k not in HTTP_KEYS:
            err(f"http_server_config.{k}", f"unknown key (expected one of {', '.join(HTTP_KEYS)})")
    if "http2" in http and not isinstance(http["http2"], bool):
        err("http_server_config.http2", "must be true or false")
    elif http.get("http2"):  # refused, not silently ignored: an operator asking for HTTP/2 would not get it
        err(
            "http_server_config.http2",
            "HTTP/2 is not supported: kvdoctor serves HTTP/1.1 (keep-alive); "
            "remove the key or set it to false",
        )
    headers = http.get("headers") or {}
    if not isinstance(headers, dict):
        err("http_server_config.headers", "must be a mapping of header name to value")
        return {}
    out = {}
    for name, value in headers.items():
        key = f"http_server_config.headers.{name}"
        if name not in HEADERS:
            err(key, f"this header can not be configured (allowed: {', '.join(HEADERS)})")
        elif not isinstance(value, str):
            err(key, "value must be a string")
        elif (allowed := HEADERS[name]) is not None and value not in allowed:
            err(key, f"invalid value {value!r}, expected one of {', '.join(allowed)}")
        else:
            out[name] = value
    return out


class WebConfigWatcher:
    """The current web config, re-read when the file or its certificates change; a bad edit keeps the last good one."""

    def __init__(self, path: str, check_every_s: float = 1.0) -> None:
        self.path = path
        self.current = load_web_config(path)
        self.last_error = ""
        self._every = check_every_s
        self._stamp = self._fingerprint()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def get(self) -> WebConfig:
        """The config to apply to this request or connection."""
        now = time.monotonic()
        if now - self._checked < self._every:
            return self.current
        with self._lock:
            if now - self._checked >= self._every:
                self._checked = now
                stamp = self._fingerprint()
                if stamp != self._stamp:
                    self._stamp = stamp
                    self._reload()
        return self.current

    def _reload(self) -> None:
        try:
            self.current, self.last_error = load_web_config(self.path), ""
            log.info("web config %s reloaded", self.path)
        except WebConfigError as exc:
            self.last_error = str(exc)
            log.error("web config %s is invalid, keeping the last good one:\n%s", self.path, exc)

    def _fingerprint(self) -> tuple[tuple[int, int] | None, ...]:
        out: list[tuple[int, int] | None] = []
        for f in (self.path, *self.current.files):
            try:
                st = os.stat(f)
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)
