"""Live capacity: what the engine actually allocated (cache_config_info) and what observed requests cost."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from kvdoctor.capacity.histogram import max_model_len_bound
from kvdoctor.promql.quantile import bucket_quantile
from kvdoctor.samples import Sample

CACHE_INFO = "vllm:cache_config_info"
LORA_INFO = "vllm:lora_requests_info"  # value: when its label set was last current; max_lora: --max-loras
PROMPT = "vllm:request_prompt_tokens_bucket"
GENERATION = "vllm:request_generation_tokens_bucket"
# Histograms on the B125(max_model_len) buckets (vllm-metrics.md §2.3, §3).
B125 = (
    PROMPT,
    GENERATION,
    "vllm:request_params_max_tokens_bucket",
    "vllm:request_max_num_generation_tokens_bucket",
    "vllm:request_prefill_kv_computed_tokens_bucket",
)


_BOUNDS: dict[str, float | None] = {}


@dataclass(frozen=True)
class LiveCapacity:
    """The engine's real capacity from one scrape, beside observed request lengths (tokens per engine)."""

    engines: int = 0
    kv_cache_tokens: int | None = None
    tokens_source: str = ""
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    kv_bytes_per_token: float | None = None
    kv_cache_max_concurrency: float | None = None
    cache_dtype: str | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None  # exact, from kv_cache_size_tokens / kv_cache_max_concurrency
    max_model_len_bound: tuple[int, int] | None = None  # [low, high) from the largest finite bucket
    requests_observed: int = 0
    prompt_p50: float | None = None
    prompt_p99: float | None = None
    generation_p50: float | None = None
    generation_p99: float | None = None
    max_loras: int | None = None  # --max-loras, from lora_requests_info (LoRA enabled)

    @property
    def request_p50_tokens(self) -> float | None:
        """Typical request: p50 prompt + p50 generation tokens."""
        return _add(self.prompt_p50, self.generation_p50)

    @property
    def request_p99_tokens(self) -> float | None:
        """Long request: p99 prompt + p99 generation (an upper bound of the p99 of the sum)."""
        return _add(self.prompt_p99, self.generation_p99)

    @property
    def max_len(self) -> int | None:
        """max_model_len if known exactly, else the lower end of its bound."""
        if self.max_model_len is not None:
            return self.max_model_len
        return self.max_model_len_bound[0] if self.max_model_len_bound else None

    def fits(self, request_tokens: float | None) -> float | None:
        """How many requests of `request_tokens` tokens the cache holds at once (whole blocks)."""
        if not self.kv_cache_tokens or not request_tokens:
            return None
        block = self.block_size or 1
        return self.kv_cache_tokens / (math.ceil(request_tokens / block) * block)

    @property
    def max_len_request_share(self) -> float | None:
        """Fraction of the cache one max-model-len request takes."""
        n = self.fits(self.max_len)
        return 1 / n if n else None

    @property
    def max_len_request_bytes(self) -> int | None:
        """Bytes one max-model-len request takes, when bytes per token are known."""
        if self.kv_bytes_per_token is None or self.max_len is None:
            return None
        return int(self.kv_bytes_per_token * self.max_len)


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _num(v: str | None) -> float | None:
    try:
        x = float(v) if v is not None else math.nan
    except ValueError:
        return None
    return x if math.isfinite(x) and x >= 0 else None  # every number here is a size, a count or a fraction


def _int(v: str | None) -> int | None:
    x = _num(v)
    return int(x) if x is not None else None


def _quantile(buckets: dict[float, float], q: float) -> float | None:
    x = bucket_quantile(q, list(buckets.items()))
    return x if math.isfinite(x) else None


def live_capacity(samples: Iterable[Sample], model_name: str | None = None) -> LiveCapacity:
    """Capacity and request lengths from one scrape's samples (histograms filtered to model_name if given)."""
    infos: dict[str, dict[str, str]] = {}
    hists: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    lora: tuple[float, str] | None = None
    for s in samples:
        name = s.name
        if name == CACHE_INFO:
            labels = dict(s.labels)
            infos[labels.get("engine", "0")] = labels
        elif name == LORA_INFO and (lora is None or s.value > lora[0]):
            lora = (s.value, dict(s.labels).get("max_lora", ""))
        elif name in B125:
            # every scrape of every target passes here with ~60 bucket samples: no dict per sample
            le_text = model = None
            for k, v in s.labels:
                if k == "le":
                    le_text = v
                elif k == "model_name":
                    model = v
            if model_name is not None and model != model_name:
                continue
            le = _bound(le_text)
            if le is not None:
                hists[name][le] += s.value
    per_engine = [_engine(labels) for labels in infos.values()]
    known = [e for e in per_engine if e[0] is not None]
    tokens, source = min(known, key=lambda e: e[0] or 0) if known else (None, "")
    first = next(iter(infos.values()), {})
    blocks, block_size = _int(first.get("num_gpu_blocks")), _int(first.get("block_size"))
    mem = _int(first.get("kv_cache_memory_bytes"))
    conc = _num(first.get("kv_cache_max_concurrency"))
    finite = [le for h in hists.values() for le, c in h.items() if math.isfinite(le)]
    bound = max_model_len_bound(max(finite)) if finite else None
    exact = None
    if tokens and conc and source == "kv_cache_size_tokens":
        guess = round(tokens / conc)
        exact = guess if bound is None or bound[0] <= guess < bound[1] else None
    prompt, gen = hists.get(PROMPT, {}), hists.get(GENERATION, {})
    return LiveCapacity(
        engines=len(infos),
        kv_cache_tokens=tokens,
        tokens_source=source,
        num_gpu_blocks=blocks,
        block_size=block_size,
        kv_cache_memory_bytes=mem,
        kv_bytes_per_token=mem / tokens if mem and tokens else None,
        kv_cache_max_concurrency=conc,
        cache_dtype=first.get("cache_dtype") if first.get("cache_dtype") not in (None, "None") else None,
        gpu_memory_utilization=_num(first.get("gpu_memory_utilization")),
        max_model_len=exact,
        max_model_len_bound=bound,
        max_loras=_int(lora[1]) if lora else None,
        requests_observed=int(prompt.get(math.inf, 0)),
        prompt_p50=_quantile(prompt, 0.5),
        prompt_p99=_quantile(prompt, 0.99),
        generation_p50=_quantile(gen, 0.5),
        generation_p99=_quantile(gen, 0.99),
    )


def _bound(le: str | None) -> float | None:
    # a bucket's `le` as a number (+Inf included), memoized: the same few dozen strings come in every scrape
    if le is None:
        return None
    if le in _BOUNDS:
        return _BOUNDS[le]
    got = math.inf if le == "+Inf" else _num(le)
    if len(_BOUNDS) < 10_000:
        _BOUNDS[le] = got
    return got


def _engine(labels: dict[str, str]) -> tuple[int | None, str]:
    # Prefer the group-aware label (vllm#42206); blocks × block size is right only for uniform models.
    tokens = _int(labels.get("kv_cache_size_tokens"))
    if tokens:
        return tokens, "kv_cache_size_tokens"
    blocks, size = _int(labels.get("num_gpu_blocks")), _int(labels.get("block_size"))
    if blocks and size:
        return blocks * size, "num_gpu_blocks × block_size"
    return None, ""
