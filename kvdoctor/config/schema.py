"""The configuration's shape and defaults."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from kvdoctor.ingest.fetch import HttpOptions
from kvdoctor.ingest.parse import ScrapeLimits
from kvdoctor.jsondoc import JsonObject
from kvdoctor.verdicts import RUNBOOK_PATH

if TYPE_CHECKING:  # podsd builds TargetSpecs from this module, so only the type is imported
    from kvdoctor.config.podsd import KubernetesSD
    from kvdoctor.config.yamlpos import Located

DEFAULT_LISTEN = "127.0.0.1:9860"


def parse_listen(listen: str) -> tuple[str, int]:
    """Split HOST:PORT ([v6]:PORT, :PORT for every interface); raises ValueError."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen address {listen!r}: expected HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


@dataclass
class TargetSpec:
    """One vLLM server to watch."""

    url: str
    name: str = ""
    max_num_seqs: int | None = None
    slo_itl_p95_s: float | None = None
    slo_ttft_p95_s: float | None = None
    model: str | None = None  # capacity preset name
    model_config: str | None = None  # path to an HF config.json
    gpu: str | None = None
    tensor_parallel: int = 1
    labels: dict[str, str] = field(default_factory=dict)
    http: HttpOptions = field(default_factory=HttpOptions)
    limits: ScrapeLimits = field(default_factory=ScrapeLimits)
    origin: dict[str, str] = field(default_factory=dict)  # "file:line" of its entry ("") and of its keys

    def where(self, key: str = "") -> str:
        """`file:line` of one of its keys (of the entry when unknown), "" for a target not from a file."""
        return self.origin.get(key) or self.origin.get("", "")

    def __post_init__(self) -> None:
        if not self.name:
            self.name = urlsplit(self.url).netloc.rsplit("@", 1)[-1] or self.url

    @property
    def safe_url(self) -> str:
        """The URL without user:password."""
        u = urlsplit(self.url)
        return urlunsplit(u._replace(netloc=u.netloc.rsplit("@", 1)[-1]))

    def __repr__(self) -> str:
        return f"TargetSpec(name={self.name!r}, url={self.safe_url!r})"


@dataclass(frozen=True)
class ScrapeDefaults:
    """The `scrape:` section: what every target gets unless its own entry says otherwise."""

    timeout_s: float = 10.0
    max_bytes: int = 16 * 1024 * 1024
    limits: ScrapeLimits = field(default_factory=ScrapeLimits)


@dataclass
class FileSD:
    """Prometheus file_sd files to read targets from (re-read when they change)."""

    files: list[str]
    refresh_s: float = 30.0


@dataclass
class PrometheusSource:
    """Where to read vLLM series when kvdoctor runs on a Prometheus instead of scraping."""

    url: str
    http: HttpOptions = field(default_factory=HttpOptions)


@dataclass
class Config:
    """Everything kvdoctor serve needs."""

    interval_s: float = 15.0
    idle_after_s: float = 30.0  # idle: no request in flight or finished, no token, for at least this long
    listen: str = DEFAULT_LISTEN
    health_listen: str | None = None  # plain-HTTP /-/healthy and /-/ready for probes, beside TLS and auth
    job: str = "vllm"
    retention_s: float = 1800.0
    rules: list[str] | None = None
    state_file: str | None = None
    log_format: str = "text"
    log_level: str = "info"
    scrape: ScrapeDefaults = field(default_factory=ScrapeDefaults)
    scrape_max_connections: int = 1024  # the connection pool shared by every scrape
    targets: list[TargetSpec] = field(default_factory=list)
    file_sd: list[FileSD] = field(default_factory=list)
    kubernetes_sd: list[KubernetesSD] = field(default_factory=list)  # pods found through the API server
    source: str = "scrape"  # or "prometheus"
    prometheus: PrometheusSource | None = None
    web_config: str | None = None
    external_url: str | None = None  # how users reach kvdoctor (a proxy's URL); default: from `listen`
    runbook_url: str | None = None  # the runbook page links point to; default: <external URL>/runbook
    notify: JsonObject | None = None
    path: str | None = None
    doc: Located | None = field(default=None, repr=False, compare=False)  # where each key was written

    def runbook_page(self, bound: str | None = None, tls: bool = False) -> str:
        """The runbook page findings link to: runbook_url, else <external URL>/runbook.

        bound is the HOST:PORT the web server actually listens on (port 0 resolved), else `listen` is used.
        """
        if self.runbook_url:
            return runbook_page(self.runbook_url)
        base = self.external_url or default_external_url(bound or self.listen, tls)
        return base.rstrip("/") + RUNBOOK_PATH


@dataclass(frozen=True)
class Overrides:
    """Config fields `kvdoctor serve` was given on the command line (None: not given, the config's value stands)."""

    listen: str | None = None
    health_listen: str | None = None
    interval_s: float | None = None
    state_file: str | None = None
    log_format: str | None = None
    rules: list[str] | None = None
    web_config: str | None = None
    external_url: str | None = None
    runbook_url: str | None = None
    targets: tuple[str | TargetSpec, ...] | None = None  # --target URLs (or specs) replace the config's
    prometheus: PrometheusSource | None = None
    source: str | None = None

    def given(self) -> list[tuple[str, object]]:
        """(Config field, value) of each flag given, in field order."""
        return [(f.name, v) for f in fields(self) if (v := getattr(self, f.name)) is not None]


def default_external_url(listen: str, tls: bool = False) -> str:
    """http(s)://HOST:PORT from a listen address; every-interface binds use this machine's name, as Prometheus does."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = socket.getfqdn()
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}"


def runbook_page(url: str) -> str:
    """A configured runbook URL as the page links append #<finding> to; a bare server URL gets /runbook."""
    u = urlsplit(url)
    if u.path in ("", "/"):
        return urlunsplit(u._replace(path=RUNBOOK_PATH))
    return url


def check_url(url: object, what: str) -> str | None:
    """Why url cannot be a base for links kvdoctor sends (None when it can)."""
    if not isinstance(url, str):
        return f"{what}: must be a string"
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.netloc:
        return f"{what}: expected an absolute http(s) URL, got {url!r}"
    if u.fragment or u.query:
        return f"{what}: no ?query or #fragment allowed (kvdoctor appends #<finding>), got {url!r}"
    return None
