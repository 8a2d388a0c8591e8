"""The knobs a what-if can turn (`--set NAME=VALUE`), validated, and what each does to the engine and the traffic."""

from __future__ import annotations

import math
from dataclasses import replace

from kvdoctor.errors import InputError
from kvdoctor.whatif import spec
from kvdoctor.whatif.model import Engine, Workload
from kvdoctor.whatif.slo import number

INT_KNOBS = ("max_num_seqs", "max_num_batched_tokens", "kv_cache_tokens", "max_model_len", "replicas")
KNOBS = (
    *INT_KNOBS,
    "kv_cache_dtype",
    "gpu_memory_utilization",
    "load",
    "enable_prefix_caching",
    "prefix_hit_ratio",
    "num_speculative_tokens",
)
FP8 = ("fp8", "fp8_e4m3", "fp8_e5m2")
ON, OFF = ("true", "on", "yes", "1"), ("false", "off", "no", "0")


class KnobError(InputError):
    """A --set the what-if cannot apply; the message names it."""


def parse_knob(text: str) -> tuple[str, float | str]:
    """NAME=VALUE → (name, value); `load` takes 1.5, x1.5 or ×1.5."""
    name, sep, raw = text.partition("=")
    name, raw = name.strip().replace("-", "_").lstrip("_"), raw.strip()
    if not sep or not raw:
        raise KnobError(f"--set {text!r}: expected NAME=VALUE, e.g. max_num_seqs=16")
    if name not in KNOBS:
        raise KnobError(f"--set {text!r}: unknown knob {name!r}; known: {', '.join(KNOBS)}")
    if name == "kv_cache_dtype":
        if raw.lower() not in (*FP8, "auto"):
            raise KnobError(f"--set {text!r}: kv_cache_dtype takes fp8 (or auto)")
        return name, raw.lower()
    if name == "enable_prefix_caching":
        if raw.lower() not in (*ON, *OFF):
            raise KnobError(f"--set {text!r}: enable_prefix_caching takes true or false")
        return name, "true" if raw.lower() in ON else "false"
    value = raw.lstrip("x×X*") if name == "load" else raw
    try:
        number = float(value)
    except ValueError:
        raise KnobError(f"--set {text!r}: {raw!r} is not a number") from None
    if name in INT_KNOBS and (number != int(number) or number < 1):
        raise KnobError(f"--set {text!r}: {name} must be a positive whole number")
    if name == "gpu_memory_utilization" and not 0 < number <= 1:
        raise KnobError(f"--set {text!r}: gpu_memory_utilization is a fraction in (0, 1]")
    if name == "num_speculative_tokens" and (number != int(number) or not 0 <= number <= spec.MAX_TOKENS):
        raise KnobError(
            f"--set {text!r}: num_speculative_tokens is a whole number from 0 (speculation off) to {spec.MAX_TOKENS}"
        )
    if name == "prefix_hit_ratio" and not 0 <= number < 1:
        raise KnobError(
            f"--set {text!r}: prefix_hit_ratio is the share of prompt tokens served from cache, in [0, 1)"
        )
    if name == "load" and number <= 0:
        raise KnobError(f"--set {text!r}: load is a positive factor, e.g. x1.5")
    return name, int(number) if name in (*INT_KNOBS, "num_speculative_tokens") else number


def settings(e: Engine) -> dict[str, int | float | bool]:
    """The engine's settings the knobs act on, in vLLM's words (the `--json` `engine` section)."""
    return {
        "max_num_seqs": e.max_num_seqs,
        "max_num_batched_tokens": e.max_num_batched_tokens,
        "num_gpu_blocks": e.num_gpu_blocks,
        "block_size": e.block_size,
        "max_model_len": e.max_model_len,
        "enable_prefix_caching": e.enable_prefix_caching,
        "num_speculative_tokens": e.num_speculative_tokens,
        "tokens_per_decode_step": round(e.accepted_per_step, 4),
        "draft_tokens_per_decode_step": round(e.draft_tokens_per_step, 4),
    }


def apply(
    engine: Engine,
    workload: Workload,
    replicas: int,
    changes: dict[str, float | str],
    info: dict[str, str],
    gpu_memory_bytes: float | None = None,
) -> tuple[Engine, Workload, int, list[str]]:
    """The engine, traffic and replica count after the changes, with a note per change."""
    e, w, n, notes = engine, workload, replicas, []
    for name, v in changes.items():
        if name == "max_num_seqs":
            e = replace(e, max_num_seqs=int(v))
        elif name == "max_num_batched_tokens":
            e = replace(e, max_num_batched_tokens=int(v))
        elif name == "kv_cache_tokens":
            e = replace(e, num_gpu_blocks=max(2, int(v) // e.block_size))
        elif name == "max_model_len":
            e = replace(e, max_model_len=int(v))
            notes.append(f"max_model_len {v}: requests longer than that are refused (prompt + output tokens)")
        elif name == "kv_cache_dtype":
            e, note = _dtype(e, str(v), info)
            notes.append(note)
        elif name == "gpu_memory_utilization":
            e, note = _memory(e, float(v), info, gpu_memory_bytes)
            notes.append(note)
        elif name == "replicas":
            n = int(v)
            notes.append(f"{n} replicas, the load split evenly")
            w = replace(w, shares=())  # how a router split it over today's engines says nothing of n
        elif name == "num_speculative_tokens":
            e, note = _speculation(e, int(v))
            notes.append(note)
        elif name == "load":
            w = w.scaled(float(v))
            notes.append(
                f"traffic ×{v:g} ({'more clients' if w.kind == 'closed' else 'a higher arrival rate'})"
            )
    e, w, caching = _prefix_caching(e, w, changes)
    notes += caching
    if e.max_num_seqs > e.max_num_batched_tokens:
        raise KnobError(
            f"--set: max_num_seqs {e.max_num_seqs} above max_num_batched_tokens {e.max_num_batched_tokens}: "
            "vLLM refuses to start"
        )
    return e, w, n, notes


def _dtype(e: Engine, dtype: str, info: dict[str, str]) -> tuple[Engine, str]:
    current = (info.get("cache_dtype") or "auto").lower()
    if dtype == "auto" or current.startswith("fp8"):
        return e, f"kv_cache_dtype {dtype}: the cache is already {current}, no change"
    blocks = e.num_gpu_blocks * 2
    return replace(e, num_gpu_blocks=blocks), (
        f"kv_cache_dtype fp8: same cache memory, half the bytes per token: {e.num_gpu_blocks} → {blocks} blocks "
        f"(assuming the model's {current} cache is 16-bit)"
    )


def _memory(e: Engine, util: float, info: dict[str, str], gpu_bytes: float | None) -> tuple[Engine, str]:
    tokens = f"ask kv_cache_tokens=N instead (the cache holds {e.num_gpu_blocks * e.block_size} tokens now)"
    cpu = _number(info.get("cpu_kvcache_space_bytes"))
    if cpu is not None:
        raise KnobError(
            f"--set gpu_memory_utilization: a CPU server's KV cache is sized by VLLM_CPU_KVCACHE_SPACE "
            f"({cpu / 2**30:.3g} GiB here), not by --gpu-memory-utilization; {tokens}"
        )
    kv_bytes = _number(info.get("kv_cache_memory_bytes"))
    current = _number(info.get("gpu_memory_utilization"))
    if kv_bytes is None or current is None:
        raise KnobError(
            "--set gpu_memory_utilization: this vLLM exports no kv_cache_memory_bytes or gpu_memory_utilization in "
            f"cache_config_info, so what a share of the GPU buys in tokens is unknown; {tokens}"
        )
    if not gpu_bytes:
        raise KnobError("--set gpu_memory_utilization: needs --gpu NAME (the GPU's memory) to size the cache")
    new_bytes = kv_bytes + (util - current) * gpu_bytes
    if new_bytes <= 0:
        raise KnobError(f"--set gpu_memory_utilization={util:g}: leaves no memory for the KV cache")
    blocks = max(2, int(e.num_gpu_blocks * new_bytes / kv_bytes))
    return replace(e, num_gpu_blocks=blocks), (
        f"gpu_memory_utilization {current:g} → {util:g}: KV cache {kv_bytes / 2**30:.1f} → "
        f"{new_bytes / 2**30:.1f} GiB, {e.num_gpu_blocks} → {blocks} blocks"
    )


def _number(label: str | None) -> float | None:
    """An info label's size or share; None for a missing one, vLLM's "None", or one that is no positive number."""
    v = number(label)
    return v if v is not None and math.isfinite(v) and v > 0 else None


def _speculation(e: Engine, k: int) -> tuple[Engine, str]:
    if e.speculation is None:
        if k == 0:
            return e, "num_speculative_tokens 0: the server does not speculate now, no change"
        raise KnobError(
            f"--set num_speculative_tokens={k}: this server does not speculate (no vllm:spec_decode_* counter "
            "moved in the window), so how often drafts would be accepted on its traffic is unknown; run one "
            "replica with speculation on and ask again from its window"
        )
    return spec.with_tokens(e, k)


def _prefix_caching(
    e: Engine, w: Workload, changes: dict[str, float | str]
) -> tuple[Engine, Workload, list[str]]:
    """enable_prefix_caching and prefix_hit_ratio together: a hit ratio needs caching on, turning caching on
    a server without it needs the hit ratio (a server that does not cache exports no hits to learn it from)."""
    on = changes.get("enable_prefix_caching")
    ratio = changes.get("prefix_hit_ratio")
    if on is None and ratio is None:
        return e, w, []
    if on == "false":
        if ratio is not None:
            raise KnobError(
                "--set prefix_hit_ratio: prefix caching is turned off by enable_prefix_caching=false"
            )
        if not e.enable_prefix_caching:
            return e, w, ["enable_prefix_caching false: prefix caching is already off, no change"]
        return (
            replace(e, enable_prefix_caching=False),
            w,
            [
                f"prefix caching off: the {w.prefix_hit_ratio:.0%} of prompt tokens served from cache in the window "
                "are computed again, and every request holds its own copy of the shared prefix"
            ],
        )
    if ratio is None:  # on == "true"
        if e.enable_prefix_caching:
            return e, w, ["enable_prefix_caching true: prefix caching is already on, no change"]
        raise KnobError(
            "--set enable_prefix_caching=true: this server runs without prefix caching, so it exports no hits "
            "to learn its traffic's shared prefixes from; add --set prefix_hit_ratio=R, the share of prompt "
            "tokens that repeat an earlier request's prefix (e.g. a system prompt's length over the prompt's)"
        )
    if on is None and not e.enable_prefix_caching:
        raise KnobError(
            "--set prefix_hit_ratio: prefix caching is off on this server (cache_config_info "
            "enable_prefix_caching=False); add --set enable_prefix_caching=true"
        )
    r = float(ratio)
    was = "caching off" if not e.enable_prefix_caching else f"{w.prefix_hit_ratio:.0%} measured"
    return (
        replace(e, enable_prefix_caching=True),
        replace(w, prefix_hit_ratio=r, computed=None),  # the window's tails went with its own prefix
        [
            f"prefix caching on with {r:.0%} of prompt tokens served from cache (given; now {was}), as one "
            "shared prefix in whole blocks"
        ],
    )
