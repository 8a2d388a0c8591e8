"""Capacity model: KV-cache arithmetic from model configs, live cache_config_info, quantified advice."""
