"""`kvdoctor plan SOURCE --slo ttft_p95=2s`: the cheapest flags and replicas that hold every SLO at a load."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from kvdoctor.capacity.presets import get_gpu, get_model
from kvdoctor.cli.whatif import add_source_arguments, load_source, source_window
from kvdoctor.errors import InputError
from kvdoctor.ingest.fetch import ScrapeError
from kvdoctor.ingest.recording import RecordingError
from kvdoctor.report.economics import parse_usd
from kvdoctor.sources.client import SourceError
from kvdoctor.whatif.candidates import Candidate, Plan
from kvdoctor.whatif.knobs import KnobError, parse_knob
from kvdoctor.whatif.plan import MAX_LOAD, Planner, plan
from kvdoctor.whatif.predict import learn
from kvdoctor.whatif.profile import describe
from kvdoctor.whatif.slo import parse_slos
from kvdoctor.whatif.sources import history_before
from kvdoctor.whatif.workload import WindowError


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser(
        "plan",
        help="the cheapest vLLM flags and replicas that hold latency SLOs at a load, and today's headroom",
    )
    p.add_argument(
        "source", nargs="?", help="a recording (JSON lines, gzip ok) or a live server's /metrics URL"
    )
    p.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="NAME=DURATION",
        help="an objective: ttft, itl or queue_time at p50/p95/p99, e.g. ttft_p95=2s (repeatable)",
    )
    load = p.add_mutually_exclusive_group()
    load.add_argument(
        "--load",
        default="x1",
        help="the traffic to plan for as a multiple of the window's, e.g. x1.5 (default x1)",
    )
    load.add_argument("--rate", type=float, help="the traffic to plan for in requests/s")
    p.add_argument("--gpu-hour-cost", metavar="USD", help="price of one GPU-hour in US dollars, e.g. 2.49")
    p.add_argument("--gpus-per-replica", type=int, default=1, metavar="N", help="GPUs behind each replica")
    p.add_argument("--json", action="store_true", help="one JSON object: slos, load, current, chosen, …")
    add_source_arguments(p)
    p.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Learn, search, print; 0 when a configuration holds every SLO, 1 when none does, 2 on bad input."""
    started = time.monotonic()
    try:
        slos = parse_slos(args.slo)
        cost = parse_usd("--gpu-hour-cost", args.gpu_hour_cost) if args.gpu_hour_cost else None
        if args.gpus_per_replica < 1:
            raise InputError("--gpus-per-replica: a positive whole number")
        gpu = get_gpu(args.gpu) if args.gpu else None
        model = get_model(args.model) if args.model else None
        snaps, where = load_source(args)
        lo, hi = source_window(args, snaps)
        where_w = f"window {lo - snaps[0].t:.0f}-{hi - snaps[0].t:.0f} s"
        try:
            history, window = history_before(snaps, lo, hi)
            basis = learn(
                history,
                window,
                max_num_seqs=args.max_num_seqs,
                max_num_batched_tokens=args.max_num_batched_tokens,
                seed=args.seed,
                model=model,
                gpu=gpu,
            )
        except WindowError as exc:
            raise WindowError(f"{where_w}: {exc}") from None
        load = _load(args, basis.measured.requests_per_s)
        planner = Planner(
            basis,
            slos,
            gpu_memory_bytes=float(gpu.memory_bytes) if gpu else None,
            gpu_hour_usd=cost,
            gpus_per_replica=args.gpus_per_replica,
        )
        result = plan(planner, load, gpu=gpu is not None)
        if basis.workload.profile:  # "×1.3 today's traffic" scales its shape: the busiest part breaks first
            result.notes.append(
                f"{describe(basis.workload.profile, basis.workload.rate_per_s)}; a load scales it"
            )
    except (InputError, RecordingError, SourceError, ScrapeError, ValueError, KeyError, OSError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"kvdoctor plan: {msg}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(f"kvdoctor plan on {where}, {where_w} ({len(window)} scrapes)\n")
        print(render(result, time.monotonic() - started))
    return 0 if result.feasible else 1


def _load(args: argparse.Namespace, measured_rate: float) -> float:
    """--rate R as a multiple of what the window measured, else --load's multiple."""
    if args.rate is None:
        _, value = parse_knob(f"load={args.load}")
        return float(value)
    if args.rate <= 0:
        raise KnobError(f"--rate {args.rate:g}: requests/s must be above zero")
    if not math.isfinite(measured_rate) or measured_rate <= 0:
        raise WindowError(
            "--rate: the window finished no request, so a rate has nothing to scale; use --load"
        )
    return float(args.rate) / measured_rate


def _s(v: Any) -> str:
    if not isinstance(v, int | float) or not math.isfinite(v):
        return "—"
    return f"{v * 1000:.3g} ms" if v < 1 else f"{v:.3g} s"


def _usd(v: float | None) -> str:
    return "—" if v is None else f"${v:,.2f}" if v >= 1 else f"${v:.3g}"


def _pct(m: float | None) -> str:
    return "—" if m is None else f"{m:+.0%}"


def _line(c: Candidate, slos: dict[str, float]) -> str:
    change = ", ".join(f"{k}={v}" for k, v in c.changes.items()) or "today's flags"
    values = "  ".join(f"{k[:-2]} {_s(c.predicted.value(k))}" for k in slos)
    if c.predicted.overload:  # past saturation those values only measure the time simulated
        cap = c.predicted.value("capacity_requests_per_s")
        values = f"overloaded (capacity {cap:.3g} req/s, the queue grows)" if cap else "overloaded"
    ok = "holds" if c.meets else "breaks"
    return (
        f"{c.replicas:>3d} × [{change}]  {values}  {ok}  {_usd(c.cost_per_hour_usd)}/h  "
        f"{_usd(c.cost_per_1m_generation_tokens_usd)}/1M gen tokens"
    )


def _band(p: Plan, key: str) -> str:
    """' (80 %: 1.1-1.6)' beside a headroom; '' when the step model gave no spread."""
    lo, hi = p.headroom_p10.get(key), p.headroom_p90.get(key)
    if lo is None or hi is None or lo == hi:
        return ""
    top = f"≥{MAX_LOAD:g}" if hi >= MAX_LOAD else f"{hi:.2f}"
    return f" (80 %: {lo:.2f}-{top})"


def _flags(c: Candidate) -> str:
    """The candidate's flag changes as `vllm serve` takes them."""
    return ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in c.changes.items()) or "today's flags"


def _margins(c: Candidate) -> str:
    return ", ".join(f"{k[:-2]} {_pct(m)}" for k, m in c.margins.items())


def _canary(m: Candidate, chosen: Candidate) -> str:
    saved = f"{chosen.replicas - m.replicas} replica(s)"
    if chosen.cost_per_hour_usd is not None and m.cost_per_hour_usd is not None:
        saved += f" ({_usd(chosen.cost_per_hour_usd - m.cost_per_hour_usd)}/h)"
    return (
        f"worth a canary: {m.replicas} replica(s) with {_flags(m)} breaks by the point prediction but holds every "
        f"SLO at the cheap end of the step model's 80 % band (margins {_margins(m)} there); only a recording of it can "
        f"tell, and it would save {saved}"
    )


def render(p: Plan, elapsed_s: float) -> str:
    """Objectives, today's headroom, each candidate tried, the pick and its margins."""
    slos = ", ".join(f"{k[:-2]} ≤ {_s(v)}" for k, v in p.slos.items())
    lines = [f"objectives: {slos} at load ×{p.load:.3g}", "", f"today's configuration at load ×{p.load:.3g}:"]
    lines.append("  " + _line(p.current, p.slos))
    for k, m in p.headroom.items():
        at = f"≥ ×{MAX_LOAD:g}" if m >= MAX_LOAD else f"×{m:.2f}"
        about = "≥" if m >= MAX_LOAD else "≈"
        rate = f" ({about} {m * p.requests_per_s:.3g} req/s)" if math.isfinite(p.requests_per_s) else ""
        lines.append(f"  headroom {k[:-2]}: breaks at {at}{_band(p, k)} today's traffic{rate}")
    lines += ["", f"candidates ({len(p.candidates)}):"]
    lines += ["  " + _line(c, p.slos) for c in p.candidates]
    c = p.chosen
    head = "plan" if p.feasible else "INFEASIBLE: no candidate holds every SLO; the closest"
    lines += ["", f"{head}: {c.replicas} replica(s) with {_flags(c)}; margins {_margins(c)}"]
    if p.might_hold:
        lines.append(_canary(p.might_hold, c))
    lines += [f"note: {n}" for n in p.notes]
    lines.append(f"{p.simulations} simulations in {elapsed_s:.1f} s")
    return "\n".join(lines)
