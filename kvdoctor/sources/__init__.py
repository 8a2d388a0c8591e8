"""Where kvdoctor reads vLLM series from besides its own scrapes: a Prometheus-compatible query API."""

from kvdoctor.sources.client import PromClient, SourceError
from kvdoctor.sources.prometheus import PrometheusEvaluator

__all__ = ["PromClient", "PrometheusEvaluator", "SourceError"]
