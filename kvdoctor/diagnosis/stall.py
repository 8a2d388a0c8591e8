"""A stalled engine: requests present, no token for 30 s. Which cause the evidence points to, and what to check."""

from __future__ import annotations

from kvdoctor.capacity.live import LiveCapacity
from kvdoctor.diagnosis.engines import Engines
from kvdoctor.verdicts import Advice


def evidence(ev: dict[str, float], engines: Engines, live: LiveCapacity | None) -> dict[str, float | str]:
    """The numbers that tell the causes apart: stalled engines, frozen gauges, KV tokens vs request lengths."""
    out: dict[str, float | str] = {
        k: ev[k] for k in ("running", "waiting", "waiting_deferred", "kv_usage") if k in ev
    }
    stalled = [e for e, sig in engines.items() if "stalled_requests" in sig]
    if stalled and len(engines) > 1:
        out["engines_stalled"] = ", ".join(stalled)
    frozen = [e for e in stalled if engines[e].get("gauge_changes_30s", 1.0) == 0]
    out["gauges_frozen"] = "yes" if stalled and len(frozen) == len(stalled) else "no"
    if live is not None:
        if live.kv_cache_tokens:
            out["kv_cache_tokens"] = float(live.kv_cache_tokens)
        if live.max_len:
            out["max_model_len"] = float(live.max_len)
        if live.prompt_p99:
            out["prompt_tokens_p99"] = round(live.prompt_p99, 1)
    return out


def advice(ev: dict[str, float], engines: Engines, live: LiveCapacity | None) -> list[Advice]:
    """Likely causes, most likely first, each with the evidence that points to it."""
    out: list[Advice] = []
    running, waiting = ev.get("running", 0.0), ev.get("waiting", 0.0)
    tokens = live.kv_cache_tokens if live else None
    longest = max((x for x in (live.max_len, live.prompt_p99) if x), default=None) if live else None
    too_long = bool(tokens and longest and longest > tokens)
    if (waiting >= 1 and running == 0) or too_long:
        if tokens and longest:
            what = f"requests may reach {longest:,.0f} tokens (--max-model-len / observed prompts) against a KV cache of {tokens:,} tokens"
        else:
            what = "nothing runs while requests wait"
        out.append(
            Advice(
                "--max-model-len",
                f"a request longer than the KV cache holds waits forever: {what}; lower `--max-model-len` below "
                "the cache's tokens or enlarge the cache (`--gpu-memory-utilization`, `--kv-cache-dtype fp8`)",
                "cache_config_info" if tokens else "signals",
            )
        )
    if ev.get("waiting_deferred", 0.0) >= 1:
        out.append(
            Advice(
                "--kv-transfer-config",
                f"{ev['waiting_deferred']:.0f} requests are deferred: a KV transfer that never completes "
                "(disaggregated prefill/decode, a KV connector) holds them; check the connector and its peer",
                "signals",
            )
        )
    else:
        out.append(
            Advice(
                "--kv-transfer-config",
                "with disaggregated serving, a KV transfer that never completes leaves requests waiting",
            )
        )
    frozen = [
        e for e, sig in engines.items() if "stalled_requests" in sig and sig.get("gauge_changes_30s") == 0
    ]
    text = "a wedged engine process: `py-spy dump` the engine core, check GPU health (Xid errors) and NCCL timeouts"
    if frozen and running >= 1:
        text = "the gauges have not moved for 30 s while requests run: " + text
    out.insert(
        0 if frozen and running >= 1 else len(out), Advice("engine", text, "signals" if frozen else "")
    )
    return out
