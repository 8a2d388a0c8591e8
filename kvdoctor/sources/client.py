"""A small client for the Prometheus HTTP query API (Prometheus, Thanos, Mimir, VictoriaMetrics)."""

from __future__ import annotations

import json
import math
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from kvdoctor.errors import TransportError
from kvdoctor.ingest.fetch import HttpOptions

if TYPE_CHECKING:  # imported by the client that queries: a command that only reads recordings never loads it
    import requests

# (labels including __name__ when the series has one, value) per element of an instant vector
InstantVector = list[tuple[dict[str, str], float]]


class SourceError(TransportError):
    """A failed query against the source; the message names the server and the problem, never a credential."""


def safe_url(url: str) -> str:
    """The URL without user:password."""
    u = urlsplit(url)
    return urlunsplit(u._replace(netloc=u.netloc.rsplit("@", 1)[-1]))


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# What one answer may take: a week's range queries of a large fleet stay well within these; a broken or hostile
# server's endless or dripping body does not (the scrape bounds, 16 MiB and 10 s, are a target page's)
ANSWER_MAX_BYTES = 256 * 1024 * 1024
ANSWER_DEADLINE_S = 120.0


class PromClient:
    """Instant queries over HTTP with the configured auth and TLS; counts every query it sends."""

    def __init__(
        self, url: str, http: HttpOptions | None = None, session: requests.Session | None = None
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SourceError(f"prometheus url must be http(s)://host:port[/prefix], got {safe_url(url)!r}")
        self.http = http or HttpOptions()
        basic = self.http.basic_auth
        if (
            basic is None and parts.username is not None
        ):  # http://user:pass@host works as it does in a browser
            basic = (parts.username, parts.password or "")
        self._auth = basic
        self.base = safe_url(url).rstrip("/")
        import requests

        self.session = session or requests.Session()
        self.session.headers.update(dict(self.http.headers))
        if self.http.bearer_token:
            self.session.headers["Authorization"] = f"Bearer {self.http.bearer_token}"
        self._lock = threading.Lock()
        self.queries_total = 0
        self.max_bytes = max(self.http.max_bytes, ANSWER_MAX_BYTES)
        self.deadline_s = max(self.http.total_timeout, ANSWER_DEADLINE_S)

    def __repr__(self) -> str:
        return f"PromClient({self.base!r})"

    def query(self, expr: str, t: float) -> InstantVector:
        """Evaluate expr at t (unix seconds); a vector or scalar as (labels, value) pairs; raises SourceError."""
        with self._lock:
            self.queries_total += 1
        body = self._post("/api/v1/query", {"query": expr, "time": f"{t:.3f}"}, expr)
        data = body.get("data")
        if not isinstance(data, dict):
            raise SourceError(f"{self.base}: query {_short(expr, 80)!r}: response has no `data` object")
        kind, result = data.get("resultType"), data.get("result")
        try:
            if kind == "vector":
                return [(dict(r["metric"]), float(r["value"][1])) for r in result]  # type: ignore[union-attr]
            if kind == "scalar":
                return [({}, float(result[1]))]  # type: ignore[index]
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise SourceError(
                f"{self.base}: query {_short(expr, 80)!r}: malformed {kind} result: {exc}"
            ) from None
        raise SourceError(f"{self.base}: query {_short(expr, 80)!r}: expected a vector, got {kind!r}")

    def query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """Evaluate expr over [start, end] every step seconds; (labels, [(t, value)]) per series; raises SourceError."""
        with self._lock:
            self.queries_total += 1
        form = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        data = self._post("/api/v1/query_range", form, expr).get("data")
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise SourceError(f"{self.base}: query_range {_short(expr, 80)!r}: expected a matrix")
        try:
            return [
                (dict(r["metric"]), [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise SourceError(
                f"{self.base}: query_range {_short(expr, 80)!r}: malformed matrix: {exc}"
            ) from None

    def query_range_samples(
        self, expr: str, t: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """The raw samples a range selector expr (e.g. `x[1h]`) holds at t, per series; raises SourceError."""
        with self._lock:
            self.queries_total += 1
        data = self._post("/api/v1/query", {"query": expr, "time": f"{t:.3f}"}, expr).get("data")
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise SourceError(f"{self.base}: query {_short(expr, 80)!r}: expected a matrix")
        return _matrix(self.base, expr, data)

    def query_raw(
        self, selector: str, lookback_s: float, t: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """The raw samples of selector over the lookback_s before t, with their own timestamps, per series."""
        return self.query_range_samples(f"{selector}[{max(1, round(lookback_s))}s]", t)

    def _post(self, path: str, form: dict[str, str], expr: str) -> dict[str, Any]:
        import requests

        what = f"{self.base}: query {_short(expr, 80)!r}"
        h = self.http
        try:
            resp = self.session.post(
                self.base + path,
                data=form,
                auth=self._auth,
                verify=h.verify,
                cert=h.client_cert,
                timeout=(h.connect_timeout, h.read_timeout),
                allow_redirects=True,
                stream=True,
            )
            raw = self._read(resp, what)
        except requests.exceptions.SSLError as exc:
            raise SourceError(f"{self.base}: TLS error: {_short(str(exc))}") from None
        except requests.exceptions.Timeout:
            raise SourceError(f"{what}: timed out after {h.read_timeout:g}s") from None
        except requests.exceptions.ConnectionError as exc:
            reason = "connection refused" if "refused" in str(exc).lower() else _short(str(exc))
            raise SourceError(f"{self.base}: cannot connect: {reason}") from None
        except requests.exceptions.RequestException as exc:
            raise SourceError(f"{what}: {type(exc).__name__}: {_short(str(exc))}") from None
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if resp.status_code in (401, 403):
            raise SourceError(f"{self.base}: HTTP {resp.status_code}: check the bearer token / basic auth")
        if not isinstance(body, dict):
            status = f"HTTP {resp.status_code}"
            text = raw[:240].decode("utf-8", "replace")
            raise SourceError(f"{what}: {status}, body is not a JSON object: {_short(text, 120)!r}")
        if resp.status_code != 200 or body.get("status") != "success":
            err = f"{body.get('errorType', 'error')}: {_short(body.get('error', 'no error message'))}"
            raise SourceError(f"{what}: HTTP {resp.status_code} {err}")
        return body

    def _read(self, resp: requests.Response, what: str) -> bytes:
        """The answer's body, at most max_bytes of it and within deadline_s; SourceError past either."""
        deadline, got, size = time.monotonic() + self.deadline_s, bytearray(), 0
        try:
            for chunk in resp.iter_content(64 * 1024):
                size += len(chunk)
                if size > self.max_bytes:
                    raise SourceError(f"{what}: answer larger than {self.max_bytes:,} bytes: not read")
                if time.monotonic() > deadline:
                    raise SourceError(f"{what}: answer not complete after {self.deadline_s:g}s: not read")
                got += chunk
        finally:
            resp.close()
        return bytes(got)


def _matrix(
    base: str, expr: str, data: dict[str, Any]
) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    try:
        return [(dict(r["metric"]), [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise SourceError(f"{base}: query {_short(expr, 80)!r}: malformed matrix: {exc}") from None


def finite(series: InstantVector) -> InstantVector:
    """The elements whose value is a number (Prometheus sends NaN for empty ratios)."""
    return [(labels, v) for labels, v in series if not math.isnan(v)]
