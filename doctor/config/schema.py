"""The configuration's shape and defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from doctor.ingest.fetch import HttpOptions
from doctor.ingest.parse import ScrapeLimits

DEFAULT_LISTEN = "127.0.0.1:9860"


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
    listen: str = DEFAULT_LISTEN
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
    source: str = "scrape"  # or "prometheus"
    prometheus: PrometheusSource | None = None
    web_config: str | None = None
    notify: dict[str, Any] | None = None
    path: str | None = None
