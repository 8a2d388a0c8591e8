"""Ingest: fetch vLLM `/metrics`, parse the text exposition, read recordings."""
