"""Rule files in Prometheus format: load and validate them, evaluate recording and alerting rules."""
