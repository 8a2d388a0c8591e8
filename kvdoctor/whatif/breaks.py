"""Where a target's history breaks: an engine restart (a new configuration) or a stall (requests, no token)."""

from __future__ import annotations

import math

from kvdoctor.whatif.window import Snap, in_flight

STALL_S = 30.0  # the pack's kvdoctor:engine_stalled:requests: requests present and no token for this long


def restarts(snaps: list[Snap]) -> list[int]:
    """Indices where the engine restarted (a counter went down, or cache_config_info changed)."""
    out = []
    for i in range(1, len(snaps)):
        a, b = snaps[i - 1], snaps[i]
        if b.get("vllm:generation_tokens_total", 0.0) < a.get("vllm:generation_tokens_total", 0.0) or (
            a.info and b.info and a.info is not b.info and _config(a.info) != _config(b.info)
        ):
            out.append(i)
    return out


def stalls(snaps: list[Snap]) -> list[tuple[int, int]]:
    """Where the engine stalled as the rule pack says it does (requests in flight, no token for STALL_S or longer):
    (the last scrape before it that saw tokens move, the first after it that did, or len(snaps) if none did)."""
    out = []
    a = None  # the scrape the token count last moved at, while requests stay in flight with it flat
    for i in range(1, len(snaps) + 1):
        s = snaps[i] if i < len(snaps) else None
        flat = s is not None and in_flight(s) > 0 and _tokens(s) == _tokens(snaps[i - 1])
        if flat and a is None:
            a = i - 1
        elif not flat and a is not None:
            if snaps[i - 1].t - snaps[a].t >= STALL_S:
                out.append((a, i))
            a = None
    return out


def _tokens(s: Snap) -> float:
    # as the pack counts them: every token a step computed (a long prefill moves it), else those generated; NaN
    # where neither is exported, which is never equal to itself, so never a stall
    computed = s.get("vllm:iteration_tokens_total_sum")
    return computed if not math.isnan(computed) else s.get("vllm:generation_tokens_total")


def _config(info: dict[str, str]) -> tuple[str, ...]:
    return tuple(
        info.get(k, "") for k in ("num_gpu_blocks", "block_size", "cache_dtype", "kv_cache_size_tokens")
    )
