"""What the daemon's state file holds, as tests write it by hand: a firing alert in the saved form."""

from __future__ import annotations

from typing import Any


def saved_alert(target: str) -> dict[str, Any]:
    """A firing VLLMKVCacheBound alert of `target` as the state file keeps it."""
    return {
        "rule": "VLLMKVCacheBound",
        "labels": {"target": target},
        "annotations": {},
        "value": 1.0,
        "active_at": 1.0e9,
        "state": "firing",
        "fired_at": 1.0e9,
        "last_seen": 1.0e9,
    }
