"""The tls_server_config section of exporter-toolkit's web-config.yml, as a Python ssl server context."""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH = {
    "": ssl.CERT_NONE,
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
# Python's ssl verifies every client certificate it asks for, so "ask but do not verify" cannot be offered.
UNVERIFIED_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
TLS_KEYS = (
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "cipher_suites",
    "curve_preferences",
    "min_version",
    "max_version",
    "prefer_server_cipher_suites",
    "client_allowed_sans",
)
TLS = tuple[
    ssl.SSLContext, list[str], tuple[str, ...]
]  # context, client_allowed_sans, files it was read from


def parse_tls(raw: Any, base: Path, err: Callable[[str, str], None]) -> TLS | None:
    """Validate tls_server_config (reporting through err) and build its server context; None means plain HTTP."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        err("tls_server_config", "must be a mapping")
        return None
    errors: list[str] = []

    def bad(key: str, msg: str) -> None:
        errors.append(key)
        err(f"tls_server_config.{key}", msg)

    for k in raw:
        if k not in TLS_KEYS:
            bad(str(k), "unknown key")
    for k in (
        "cert",
        "key",
        "client_ca",
        "cert_file",
        "key_file",
        "client_auth_type",
        "client_ca_file",
        "min_version",
        "max_version",
    ):
        if raw.get(k) is not None and not isinstance(raw[k], str):
            bad(k, "must be a string")
    if errors:
        return None
    if not any(
        raw.get(k)
        for k in ("cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file", "client_auth_type")
    ):
        return None  # exporter-toolkit: no TLS settings means plain HTTP
    for k in ("cipher_suites", "curve_preferences"):
        if raw.get(k):
            bad(k, "not supported by kvdoctor; remove it to use OpenSSL's defaults")
    files = {k: str(base / raw[k]) for k in ("cert_file", "key_file", "client_ca_file") if raw.get(k)}
    for k, f in files.items():
        if not Path(f).is_file():
            bad(k, f"{f}: no such file")
    if not raw.get("cert_file") and not raw.get("cert"):
        bad("cert_file", "missing one of cert or cert_file")
    if not raw.get("key_file") and not raw.get("key"):
        bad("key_file", "missing one of key or key_file")
    auth = raw.get("client_auth_type") or ""
    has_ca = bool(raw.get("client_ca_file") or raw.get("client_ca"))
    if auth in UNVERIFIED_AUTH:
        bad(
            "client_auth_type",
            f"{auth} is not supported by kvdoctor (Python's ssl verifies every client "
            "certificate it asks for); use VerifyClientCertIfGiven or RequireAndVerifyClientCert",
        )
    elif auth not in CLIENT_AUTH:
        bad(
            "client_auth_type",
            f"invalid value {auth!r}, expected one of {', '.join(k for k in CLIENT_AUTH if k)}",
        )
    elif CLIENT_AUTH[auth] == ssl.CERT_NONE and has_ca:
        bad("client_ca_file", "client CAs are configured without a client_auth_type that verifies them")
    elif CLIENT_AUTH[auth] != ssl.CERT_NONE and not has_ca:
        bad("client_auth_type", f"{auth} needs client_ca_file (or client_ca) to verify client certificates")
    versions = {}
    for k, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        v = raw.get(k) or default
        if v not in TLS_VERSIONS:
            bad(k, f"invalid value {v!r}, expected one of {', '.join(TLS_VERSIONS)}")
        versions[k] = TLS_VERSIONS.get(v)
    allowed: list[str] = []
    sans = raw.get("client_allowed_sans")
    if sans is not None:
        if not isinstance(sans, list) or not all(isinstance(s, str) for s in sans):
            bad("client_allowed_sans", "must be a list of strings")
        elif auth != "RequireAndVerifyClientCert":
            bad("client_allowed_sans", "requires client_auth_type RequireAndVerifyClientCert")
        else:
            allowed = list(sans)
    prefer = raw.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        bad("prefer_server_cipher_suites", "must be true or false")
    if errors:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.minimum_version, ctx.maximum_version = versions["min_version"], versions["max_version"]  # type: ignore[assignment]
    except (ValueError, ssl.SSLError) as exc:
        bad("min_version", f"not usable with this OpenSSL: {exc}")
        return None
    if prefer:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    try:
        _load_chain(ctx, files.get("cert_file"), raw.get("cert"), files.get("key_file"), raw.get("key"))
    except (OSError, ssl.SSLError) as exc:
        bad("cert_file", f"cannot load the certificate and key: {exc}")
    ctx.verify_mode = CLIENT_AUTH[auth]
    if has_ca:
        try:
            ctx.load_verify_locations(cafile=files.get("client_ca_file"), cadata=raw.get("client_ca") or None)
        except (OSError, ssl.SSLError) as exc:
            bad("client_ca_file", f"cannot load client CAs: {exc}")
    return None if errors else (ctx, allowed, tuple(files.values()))


def _load_chain(
    ctx: ssl.SSLContext, cert_file: str | None, cert: str | None, key_file: str | None, key: str | None
) -> None:
    # ssl only loads certificates from files, so inline PEM goes through a private temporary directory.
    with tempfile.TemporaryDirectory() as tmp:
        if not cert_file:
            cert_file = os.path.join(tmp, "cert.pem")
            Path(cert_file).write_text(cert or "", encoding="utf-8")
        if not key_file:
            key_file = os.path.join(tmp, "key.pem")
            Path(key_file).write_text(key or "", encoding="utf-8")
        ctx.load_cert_chain(cert_file, key_file)
