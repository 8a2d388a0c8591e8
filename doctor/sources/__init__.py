"""Where kvdoctor reads vLLM series from besides its own scrapes: a Prometheus-compatible query API."""

from doctor.sources.client import PromClient, SourceError
from doctor.sources.prometheus import PrometheusEvaluator

__all__ = ["PromClient", "PrometheusEvaluator", "SourceError"]
