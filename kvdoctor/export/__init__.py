"""Exports of kvdoctor's diagnoses in formats other tools load (OpenMetrics for promtool backfilling)."""
