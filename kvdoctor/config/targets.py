"""Validate one target entry (a URL string or a mapping) and its HTTP options."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kvdoctor.config.durations import duration_seconds
from kvdoctor.config.schema import ScrapeDefaults, TargetSpec
from kvdoctor.config.yamlpos import KeyPath, Located
from kvdoctor.ingest.fetch import HttpOptions
from kvdoctor.ingest.parse import ScrapeLimits

LIMIT_KEYS = ("sample_limit", "label_limit", "label_value_length_limit")
TARGET_KEYS = {
    "url",
    "name",
    "max_num_seqs",
    "slo",
    "model",
    "model_config",
    "gpu",
    "tensor_parallel",
    "labels",
    "bearer_token",
    "bearer_token_file",
    "basic_auth",
    "tls",
    "timeout",
    "headers",
    "max_bytes",
    *LIMIT_KEYS,
}
HTTP_KEYS = {"bearer_token", "bearer_token_file", "basic_auth", "tls", "timeout", "headers"}


def metrics_url(url: str) -> str:
    """The scrape URL for a target as typed: `http://` when it has no scheme, `/metrics` when it has no path."""
    text = url.strip()
    parts = urlsplit(text if "://" in text else f"http://{text}")
    return urlunsplit(parts._replace(path="/metrics") if parts.path in ("", "/") else parts)


def _secret(d: dict[str, Any], key: str, doc: Located, path: KeyPath, errors: list[str]) -> str | None:
    if d.get(key) is not None:
        return str(d[key])
    file = d.get(f"{key}_file")
    if file is None:
        return None
    try:
        return Path(str(file)).read_text(encoding="utf-8").strip()
    except OSError as exc:
        errors.append(f"{doc.where(*path, f'{key}_file')}: {key}_file: cannot read {file}: {exc.strerror}")
        return None


def count(
    d: dict[str, Any], key: str, default: int, where: str, errors: list[str], zero: bool = False
) -> int:
    """A positive integer setting (0 allowed when zero), or default when absent; appends an error when bad."""
    v = d.get(key)
    if v is None:
        return default
    if not isinstance(v, int) or isinstance(v, bool) or v < (0 if zero else 1):
        errors.append(f"{where}: {key}: a {'non-negative' if zero else 'positive'} integer")
        return default
    return v


def limits(
    d: dict[str, Any], doc: Located, path: KeyPath, errors: list[str], base: ScrapeLimits
) -> ScrapeLimits:
    """sample_limit, label_limit, label_value_length_limit over base (0 turns a limit off)."""
    values = {k: count(d, k, getattr(base, k), doc.where(*path, k), errors, zero=True) for k in LIMIT_KEYS}
    return ScrapeLimits(**values)


def http_options(
    d: dict[str, Any],
    doc: Located,
    path: KeyPath,
    errors: list[str],
    timeout: float = 10.0,
    max_bytes: int = 16 * 1024 * 1024,
) -> HttpOptions:
    """HttpOptions from bearer_token(_file), basic_auth, tls, timeout, headers."""
    token = _secret(d, "bearer_token", doc, path, errors)
    basic = None
    ba = d.get("basic_auth")
    if ba is not None:
        if not isinstance(ba, dict) or "username" not in ba:
            errors.append(f"{doc.where(*path, 'basic_auth')}: basic_auth: needs `username` and `password`")
        else:
            pw = _secret(ba, "password", doc, (*path, "basic_auth"), errors) or ""
            basic = (str(ba["username"]), pw)
    verify: bool | str = True
    cert = None
    tls = d.get("tls") or {}
    if not isinstance(tls, dict):
        errors.append(f"{doc.where(*path, 'tls')}: tls: must be a mapping")
        tls = {}
    if tls.get("insecure_skip_verify"):
        verify = False
    elif tls.get("ca_file"):
        verify = str(tls["ca_file"])
    if tls.get("cert_file") and tls.get("key_file"):
        cert = (str(tls["cert_file"]), str(tls["key_file"]))
    if d.get("timeout") is not None:
        try:
            timeout = duration_seconds(d["timeout"])
        except ValueError:
            errors.append(f"{doc.where(*path, 'timeout')}: timeout: not a duration")
    headers = d.get("headers") or {}
    if not isinstance(headers, dict):
        errors.append(f"{doc.where(*path, 'headers')}: headers: must be a mapping")
        headers = {}
    return HttpOptions(
        connect_timeout=min(3.0, timeout),
        read_timeout=timeout,
        total_timeout=timeout,
        max_bytes=max_bytes,
        bearer_token=token,
        basic_auth=basic,
        verify=verify,
        client_cert=cert,
        headers=tuple((str(k), str(v)) for k, v in headers.items()),
    )


def parse_target(
    item: Any,
    doc: Located,
    path: KeyPath,
    errors: list[str],
    defaults: ScrapeDefaults | None = None,
) -> TargetSpec | None:
    """A TargetSpec from a URL string or a mapping (the `scrape:` defaults under it); None when invalid."""
    defaults = defaults or ScrapeDefaults()
    where = doc.where(*path)
    if isinstance(item, str):
        item = {"url": item}
    if not isinstance(item, dict):
        errors.append(f"{where}: a target is a URL or a mapping with `url`")
        return None
    before = len(errors)
    for key in item:
        if key not in TARGET_KEYS:
            errors.append(f"{doc.where(*path, key)}: unknown target key {key!r}")
    given = str(item.get("url", ""))
    url = metrics_url(given) if given else ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        errors.append(f"{doc.where(*path, 'url')}: url: expected http(s)://host:port/metrics, got {given!r}")
    mns = item.get("max_num_seqs")
    if mns is not None and (not isinstance(mns, int) or isinstance(mns, bool) or mns <= 0):
        errors.append(f"{doc.where(*path, 'max_num_seqs')}: max_num_seqs: a positive integer")
        mns = None
    slo = item.get("slo") or {}
    slos: dict[str, float] = {}
    if not isinstance(slo, dict):
        errors.append(f"{doc.where(*path, 'slo')}: slo: a mapping of itl_p95 / ttft_p95 to durations")
        slo = {}
    for key, v in slo.items():
        if key not in ("itl_p95", "ttft_p95"):
            errors.append(f"{doc.where(*path, 'slo', key)}: slo: unknown SLO {key!r} (itl_p95, ttft_p95)")
            continue
        try:
            slos[key] = duration_seconds(v)
        except ValueError:
            errors.append(f"{doc.where(*path, 'slo', key)}: slo.{key}: not a duration: {v!r}")
    labels = item.get("labels") or {}
    if not isinstance(labels, dict):
        errors.append(f"{doc.where(*path, 'labels')}: labels: must be a mapping")
        labels = {}
    tp = item.get("tensor_parallel", 1)
    if not isinstance(tp, int) or tp < 1:
        errors.append(f"{doc.where(*path, 'tensor_parallel')}: tensor_parallel: a positive integer")
        tp = 1
    max_bytes = count(item, "max_bytes", defaults.max_bytes, doc.where(*path, "max_bytes"), errors)
    http = http_options(item, doc, path, errors, defaults.timeout_s, max_bytes)
    lim = limits(item, doc, path, errors, defaults.limits)
    if len(errors) > before:
        return None
    return TargetSpec(
        url=url,
        name=str(item.get("name") or ""),
        max_num_seqs=mns,
        slo_itl_p95_s=slos.get("itl_p95"),
        slo_ttft_p95_s=slos.get("ttft_p95"),
        model=item.get("model"),
        model_config=item.get("model_config"),
        gpu=item.get("gpu"),
        tensor_parallel=tp,
        labels={str(k): str(v) for k, v in labels.items()},
        http=http,
        limits=lim,
        origin={"": where, **{k: doc.where(*path, k) for k in ("model", "model_config", "gpu") if k in item}},
    )
