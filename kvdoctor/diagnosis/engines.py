"""Per-engine evidence: which data-parallel engines explain a target's class, and which queue while others idle."""

from __future__ import annotations

from kvdoctor.verdicts import Advice

Engines = dict[str, dict[str, float]]  # engine ("0", "1", … or "" without the label) -> signal key -> value


def _names(engines: Engines, key: str) -> list[str]:
    return [e for e, sig in engines.items() if key in sig]


def _label(names: list[str]) -> str:
    return ", ".join(n or "(unlabelled)" for n in names)


def summary(engines: Engines) -> dict[str, float | str]:
    """The target-level evidence about its engines: how many, which queue, which have room."""
    if len(engines) <= 1:
        return {}
    out: dict[str, float | str] = {"engines": float(len(engines))}
    for key, what in (("pressed", "engines_queuing"), ("room", "engines_with_room")):
        names = _names(engines, key)
        if names:
            out[what] = _label(names)
    return out


def explain(bottleneck: str, engines: Engines) -> dict[str, float | str]:
    """Which engines hold the limit `bottleneck`, with their numbers (empty for one engine)."""
    if len(engines) <= 1:
        return {}
    key = {"kv_cache": "kv_bound", "batch_cap": "batch_cap_plateau"}.get(bottleneck)
    out: dict[str, float | str] = {"engines": float(len(engines))}
    if key is None:
        return out
    out[f"engines_{bottleneck}"] = _label(_names(engines, key))
    return out


def imbalance_evidence(engines: Engines) -> dict[str, float | str]:
    """For engine_imbalance: the queuing engines' and the roomy engines' running and waiting."""
    out = summary(engines)
    for e, sig in engines.items():
        if "pressed" in sig or "room" in sig:
            out[f"engine_{e or '-'}_running_avg_1m"] = sig.get("running_avg_1m", 0.0)
            out[f"engine_{e or '-'}_waiting_avg_1m"] = sig.get("waiting_avg_1m", 0.0)
    return out


def imbalance_advice(engines: Engines) -> list[Advice]:
    """What to look at when one engine queues while others have room."""
    queuing = _label(_names(engines, "pressed")) or "one engine"
    room = _label(_names(engines, "room")) or "others"
    return [
        Advice(
            "--data-parallel-size",
            f"engine {queuing} queues while engine(s) {room} have room: check vLLM's data-parallel load balancing "
            "(`--data-parallel-size` with its internal balancer, or `--data-parallel-hybrid-lb`/external LB modes)",
            "signals",
        ),
        Advice(
            "router",
            "an external router's policy (least-load or KV-aware rather than round-robin or hash) decides where "
            "requests land",
        ),
        Advice(
            "session affinity",
            "session affinity, prefix-aware routing or an `X-data-parallel-rank` header can pin most traffic to "
            "one rank; relax it when one engine queues",
        ),
    ]


def balance_first(engines: Engines) -> list[Advice]:
    """Before a bigger cap or cache: when the limited engine queues while others have room, spread the load."""
    room = _names(engines, "room")
    queuing = _names(engines, "pressed")
    if len(engines) <= 1 or not room or not queuing:
        return []
    return [
        Advice(
            "router",
            f"engine {_label(queuing)} hits the limit while engine(s) {_label(room)} have room: spread the load "
            "first (see engine_imbalance); the numbers below are per engine",
            "signals",
        )
    ]
