"""`kvdoctor whatif SOURCE --set NAME=VALUE …`: predict what a flag change buys, from the server's own metrics."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvdoctor.capacity.presets import get_gpu, get_model
from kvdoctor.cli import common
from kvdoctor.cli.common import build_pipeline, load_config_or_exit
from kvdoctor.cli.whatif_table import render
from kvdoctor.config.durations import duration_seconds
from kvdoctor.errors import InputError
from kvdoctor.ingest.fetch import HttpOptions, ScrapeError, fetch
from kvdoctor.ingest.parse import ParseError, parse
from kvdoctor.ingest.recording import ParsedFrame, RecordingError, parse_frames
from kvdoctor.replay import replay
from kvdoctor.sources.client import PromClient
from kvdoctor.whatif.knobs import KNOBS, KnobError, parse_knob
from kvdoctor.whatif.predict import predict
from kvdoctor.whatif.sources import (
    default_window,
    history_before,
    matrix_snaps,
    parse_window,
    recording_snaps,
)
from kvdoctor.whatif.window import Snap, in_flight, snapshot
from kvdoctor.whatif.workload import WindowError


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("whatif", help="predict what a vLLM flag change buys, from the server's own metrics")
    p.add_argument(
        "source", nargs="?", help="a recording (JSON lines, gzip ok) or a live server's /metrics URL"
    )
    p.add_argument(
        "--set",
        dest="changes",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"a change (repeatable), e.g. load=x1.5, kv_cache_dtype=fp8; knobs: {', '.join(KNOBS)}",
    )
    p.add_argument(
        "--json", action="store_true", help="one JSON object: measured, predicted_unchanged, predicted…"
    )
    add_source_arguments(p)
    p.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    p.set_defaults(run=run)


def add_source_arguments(p: Any) -> None:
    """The flags that say where the window comes from and what the server runs (shared with `plan`)."""
    p.add_argument(
        "--window",
        help="FROM:TO seconds from the recording's start to learn from (default: the last "
        "steady stretch of load)",
    )
    p.add_argument("--prometheus-url", help="read the target's history from this Prometheus instead")
    p.add_argument("--target", help="with --prometheus-url: the target's `instance` label")
    p.add_argument(
        "--duration",
        help="live URL: how long to sample (default 60s); Prometheus: how far back (default 10m)",
    )
    p.add_argument(
        "--interval", type=float, default=2.0, help="live URL: seconds between scrapes (default 2)"
    )
    p.add_argument("--max-num-seqs", type=int, help="the server's --max-num-seqs, if known (not exported)")
    p.add_argument(
        "--max-num-batched-tokens", type=int, help="the server's --max-num-batched-tokens, if known"
    )
    p.add_argument(
        "--gpu",
        help="GPU preset, e.g. H100: sizes gpu_memory_utilization and, with --model, gives "
        "the step-time fit a roofline prior",
    )
    p.add_argument("--model", help="model preset, e.g. Qwen3-8B (with --gpu: the roofline prior)")


def run(args: argparse.Namespace) -> int:
    """Learn, simulate, print; 0 on a prediction, 2 on bad input or a window the what-if cannot learn from."""
    try:
        changes = dict(parse_knob(c) for c in args.changes)
        if not changes:
            raise KnobError("--set: give at least one change, e.g. --set max_num_seqs=16")
        gpu = get_gpu(args.gpu) if args.gpu else None
        model = get_model(args.model) if args.model else None
        gpu_bytes = float(gpu.memory_bytes) if gpu else None
        snaps, measured_class, where = _load(args)
        lo, hi = source_window(args, snaps)
        where_w = f"window {lo - snaps[0].t:.0f}-{hi - snaps[0].t:.0f} s"
        try:
            history, window = history_before(snaps, lo, hi)
            pred = predict(
                history,
                window,
                changes,
                max_num_seqs=args.max_num_seqs,
                max_num_batched_tokens=args.max_num_batched_tokens,
                gpu_memory_bytes=gpu_bytes,
                measured_bottleneck=measured_class,
                seed=args.seed,
                model=model,
                gpu=gpu,
            )
        except WindowError as exc:
            raise WindowError(f"{where_w}: {exc}") from None
    except (ValueError, KeyError, OSError) as exc:  # InputError is a ValueError; TransportError: cli.main (3)
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"kvdoctor whatif: {msg}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(pred.to_dict()))
    else:
        t0 = snaps[0].t
        print(f"kvdoctor whatif on {where}, window {lo - t0:.0f}-{hi - t0:.0f} s ({len(window)} scrapes)\n")
        print(render(pred))
    return 0


def source_window(args: argparse.Namespace, snaps: list[Snap]) -> tuple[float, float]:
    """The window to learn from: --window on a recording, all of a live sample, else the last steady stretch."""
    if args.window and not _is_recording(args):
        raise WindowError("--window applies to a recording; a live or Prometheus source uses --duration")
    if args.window:
        return parse_window(args.window, snaps)
    if args.source and not args.prometheus_url and not _is_recording(args):
        return snaps[0].t, snaps[-1].t  # a live server: all it sampled
    if not any(in_flight(s) for s in snaps):
        raise WindowError(
            f"no request ran or waited in any of its {len(snaps)} scrapes: an idle server has no load to learn from"
        )
    return default_window(snaps, busy_period=True)


def load_source(args: argparse.Namespace) -> tuple[list[Snap], str]:
    """The snapshots of a recording, a live URL or a Prometheus target, and a phrase naming where they came from."""
    snaps, _, where = _load(args)
    return snaps, where


def _is_recording(args: argparse.Namespace) -> bool:
    return bool(args.source) and not args.prometheus_url and "://" not in args.source


def _load(args: argparse.Namespace) -> tuple[list[Snap], Any, str]:
    if args.prometheus_url:
        if not args.target:
            raise WindowError("--prometheus-url needs --target NAME (the target's instance label)")
        return _prometheus(args), None, f"{args.target} via {args.prometheus_url}"
    if not args.source:
        raise WindowError("give a recording, a /metrics URL, or --prometheus-url URL --target NAME")
    if "://" in args.source or args.source.startswith(("localhost:", "127.")):
        snaps, cls = _sample(args)
        return snaps, (lambda lo, hi: cls), args.source
    path = Path(args.source)
    if not path.is_file():
        raise RecordingError(f"{path}: no such recording")
    frames = parse_frames(path)  # once, for the snapshots and the measured class's replay
    return recording_snaps(path, frames), _replayer(path, frames), str(path)


def _replayer(path: Path, frames: list[ParsedFrame]) -> Callable[[float, float], str | None]:
    """The class kvdoctor gave during a span of the recording, replaying it through the real pipeline: once for the
    widest span asked, the narrower ones (a window's busiest part) read from the same cycles."""
    done: list[tuple[float, list[str]]] = []
    covered = (math.inf, -math.inf)

    def replayed(lo: float, hi: float) -> str | None:
        nonlocal covered
        if lo < covered[0] - 1e-6 or hi > covered[1] + 1e-6:  # a part of the window is read from its cycles
            done[:], covered = window_cycles(path, lo, hi, frames=frames), (lo, hi)
        seen = Counter(v for t, verdicts in done if lo <= t <= hi for v in verdicts)
        return seen.most_common(1)[0][0] if seen else None

    return replayed


def window_verdicts(
    path: Path, lo: float, hi: float, interval_s: float = 10.0, frames: list[ParsedFrame] | None = None
) -> Counter[str]:
    """The verdicts of the window [lo, hi] of a recording (its frames, when parsed already), evaluated every
    interval_s: what the measured class is the most common of."""
    return Counter(v for _, verdicts in window_cycles(path, lo, hi, interval_s, frames) for v in verdicts)


def window_cycles(
    path: Path, lo: float, hi: float, interval_s: float = 10.0, frames: list[ParsedFrame] | None = None
) -> list[tuple[float, list[str]]]:
    """Each cycle's time and verdicts (other than unknown) over the window [lo, hi] of a recording."""
    # every 10 s, not 5 (the daemon evaluates every 15 s): the class of every recording's default window is the same
    # either way, and the relief checks a cycle may simulate were a third of whatif's time on a 5-minute window
    cfg = load_config_or_exit(None)
    # books only: the relief check that decides a verdict is simulated, the advice's effects (never shown here) not
    # … and from the window's start: a verdict before it is never read (the rules still see the whole history)
    pipeline = build_pipeline(cfg, None, [str(path)], books_only=True, judged_from=lo) if cfg else None
    seen: list[tuple[float, list[str]]] = []
    if pipeline is None:
        return seen
    parsed = {str(path): frames} if frames is not None else None
    for cycle in replay(pipeline, [str(path)], interval_s=interval_s, parsed=parsed):
        if cycle.t > hi:
            break
        if lo <= cycle.t:
            seen.append((cycle.t, [d.bottleneck for d in cycle.diagnoses if d.bottleneck != "unknown"]))
    return seen


def _sample(args: argparse.Namespace) -> tuple[list[Snap], str | None]:
    url = args.source if "://" in args.source else f"http://{args.source}"
    if url.rstrip("/").count("/") == 2:
        url = url.rstrip("/") + "/metrics"
    duration = duration_seconds(args.duration or "60s")
    http = HttpOptions(total_timeout=min(10.0, max(2.0, args.interval * 3)))
    tty = sys.stderr.isatty() and not args.json
    snaps: list[Snap] = []
    start = common.CLOCK.time()
    last_error = ""
    while True:
        now = common.CLOCK.time()
        try:
            snaps.append(snapshot(now, parse(fetch(url, http)).samples))
        except (ScrapeError, ParseError) as exc:
            last_error = str(exc)
        if tty:
            bits = f"{len(snaps)} scrapes" + (f", last error: {last_error[:60]}" if last_error else "")
            print(
                f"\rsampling {min(now - start, duration):4.0f}/{duration:.0f} s  {bits}".ljust(100),
                end="",
                file=sys.stderr,
                flush=True,
            )
        if now - start >= duration:
            break
        common.CLOCK.wait(max(0.0, args.interval - (common.CLOCK.time() - now)))
    if tty:
        print(file=sys.stderr)
    if not snaps:
        raise ScrapeError(f"no successful scrape of {url}: {last_error}")
    return snaps, None


def _prometheus(args: argparse.Namespace) -> list[Snap]:
    lookback = duration_seconds(args.duration or "10m")
    client = PromClient(args.prometheus_url)
    end = time.time()
    target = args.target.replace("\\", "\\\\").replace('"', '\\"')
    selector = f'{{__name__=~"vllm:.+", instance="{target}"}}'
    snaps = matrix_snaps(client.query_raw(selector, lookback, end))
    if not snaps:  # Prometheus answered: the --target names nothing it holds (bad input, not transport)
        raise InputError(
            f"{client.base}: no vllm:* series for instance {args.target!r} in the last {lookback:g}s"
        )
    return snaps
