"""`kvdoctor capacity`: KV-cache arithmetic for a model on a GPU, beside a live engine's own figures."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvdoctor.capacity.advice import kv_cache_advice
from kvdoctor.capacity.arch import KV_CACHE_DTYPES, WEIGHTS_DTYPES, ModelSpec
from kvdoctor.capacity.budget import (
    DEFAULT_UTILIZATION,
    CapacityEstimate,
    Deployment,
    ModelFigures,
    estimate,
    model_figures,
)
from kvdoctor.capacity.config import load_model_config
from kvdoctor.capacity.live import LiveCapacity, live_capacity
from kvdoctor.capacity.presets import (
    GpuSpec,
    custom_gpu,
    get_gpu,
    get_model,
    gpu_names,
    model_names,
)
from kvdoctor.capacity.report import table, to_dict
from kvdoctor.cli.common import positive_int_arg
from kvdoctor.fmt import parse_size
from kvdoctor.sources.exposition import fetch_text, recording_text, samples_from_text


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return v


def _size(text: str) -> int:
    try:
        v = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1 byte, got {text}")
    return v


def _fraction(text: str) -> float:
    v = _positive_float(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return v


def add_parser(subparsers: Any) -> None:
    """Add the `capacity` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser(
        "capacity",
        help="KV-cache capacity: tokens, concurrency and what each option buys",
        description="KV-cache arithmetic from a model preset or config.json, and/or the capacity a live vLLM "
        f"engine reports. Models: {', '.join(model_names())}. GPUs: {', '.join(gpu_names())}.",
    )
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", metavar="NAME", help="built-in model preset (name or HF repo id)")
    model.add_argument("--config", metavar="config.json", help="a Hugging Face config.json")
    live = p.add_mutually_exclusive_group()
    live.add_argument("--url", metavar="URL", help="scrape one vLLM /metrics")
    live.add_argument("--recording", metavar="FILE", help="use the last scrape of a recording (.jsonl[.gz])")
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", metavar="NAME", help="GPU preset")
    gpu.add_argument("--gpu-memory", metavar="GiB", type=_positive_float, help="GPU memory in GiB")
    p.add_argument("--tensor-parallel", metavar="N", type=positive_int_arg, default=1)
    p.add_argument(
        "--gpu-memory-utilization",
        metavar="F",
        type=_fraction,
        default=None,
        help=f"default: the engine's, else {DEFAULT_UTILIZATION}",
    )
    p.add_argument(
        "--max-model-len",
        metavar="N",
        type=positive_int_arg,
        default=None,
        help="default: the engine's, else the model's max_position_embeddings",
    )
    p.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default=None)
    p.add_argument(
        "--weights-dtype", choices=WEIGHTS_DTYPES, default=None, help="default: as the checkpoint ships"
    )
    p.add_argument(
        "--kv-cache-bytes",
        metavar="SIZE",
        type=_size,
        default=None,
        help="KV cache per GPU (like --kv-cache-memory-bytes): 50GB, 50GiB or bytes; replaces the memory estimate",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _model(args: argparse.Namespace) -> ModelSpec | None:
    if args.model:
        return get_model(args.model)
    if args.config:
        return load_model_config(args.config)
    return None


def _gpu(args: argparse.Namespace) -> GpuSpec | None:
    if args.gpu:
        return get_gpu(args.gpu)
    return custom_gpu(args.gpu_memory) if args.gpu_memory else None


def _live(args: argparse.Namespace) -> LiveCapacity | None:
    if args.url:
        text = fetch_text(args.url)
    elif args.recording:
        text = recording_text(args.recording)
    else:
        return None
    return live_capacity(samples_from_text(text))


def _estimate(
    args: argparse.Namespace, spec: ModelSpec, live: LiveCapacity | None
) -> CapacityEstimate | ModelFigures:
    """The estimate when the cache can be sized (a GPU or a cache size), else the model's own figures."""
    gpu = _gpu(args)
    kv_bytes = args.kv_cache_bytes
    if kv_bytes is None and gpu is None and live is not None and live.kv_cache_memory_bytes:
        kv_bytes = live.kv_cache_memory_bytes
    util = (
        args.gpu_memory_utilization or (live.gpu_memory_utilization if live else None) or DEFAULT_UTILIZATION
    )
    kv_dtype = args.kv_cache_dtype or (
        "fp8" if live and (live.cache_dtype or "").startswith("fp8") else "auto"
    )
    dep = Deployment(
        model=spec,
        gpu=gpu,
        tensor_parallel=args.tensor_parallel,
        gpu_memory_utilization=util,
        max_model_len=args.max_model_len or (live.max_model_len if live else None),
        kv_cache_dtype=kv_dtype,
        weights_dtype=args.weights_dtype,
        kv_cache_bytes=kv_bytes,
    )
    return model_figures(dep) if kv_bytes is None and gpu is None else estimate(dep)


def run(args: argparse.Namespace) -> int:
    """Run `kvdoctor capacity`: 0 on success, 2 on a usage or input error (message on stderr)."""
    if not (args.model or args.config or args.url or args.recording):
        print("kvdoctor capacity: give --model, --config, --url or --recording", file=sys.stderr)
        return 2
    try:
        spec = _model(args)
        live = _live(args)
        est = _estimate(args, spec, live) if spec is not None else None
    except ValueError as e:  # InputError (a ValueError) and flags that do not fit; TransportError: cli.main
        print(f"kvdoctor capacity: {e}", file=sys.stderr)
        return 2
    if live is not None and not live.engines and est is None:
        print(
            "kvdoctor capacity: the scrape has no vllm:cache_config_info; add --model or --config",
            file=sys.stderr,
        )
        return 2
    advice = kv_cache_advice(live, est if isinstance(est, CapacityEstimate) else None, None)
    if args.json:
        print(json.dumps(to_dict(est, live, advice), indent=2))
    else:
        print(table(est, live, advice))
    return 0
