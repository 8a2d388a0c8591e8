"""`kvdoctor check URL`: sample a live vLLM server for a while and print what limits it and what to change."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvdoctor import fmt, terminal
from kvdoctor.capacity.presets import PresetError, get_gpu, get_model
from kvdoctor.cli import common
from kvdoctor.cli.common import build_pipeline, interval_arg, load_config_or_exit, positive_int_arg
from kvdoctor.config import TargetSpec
from kvdoctor.config.durations import duration_seconds, parse_duration
from kvdoctor.config.targets import metrics_url
from kvdoctor.errors import EXIT_TRANSPORT
from kvdoctor.ingest.fetch import HttpOptions, ScrapeError, fetch
from kvdoctor.targets import target_facts
from kvdoctor.verdicts import LIMITS, Diagnosis

WINDOW_S = 15.0  # the pack names a limit once two scrapes lie this far apart (kvdoctor:window:ready)


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("check", help="sample a live vLLM server and report its limit")
    p.add_argument("url", help="the server's /metrics URL (or http://host:port)")
    p.add_argument("--duration", default="60s", help="how long to sample (default 60s)")
    p.add_argument("--interval", type=interval_arg, default=2.0, help="time between scrapes (default 2s)")
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    p.add_argument("--max-num-seqs", type=positive_int_arg, help="the server's --max-num-seqs, if known")
    p.add_argument("--slo-itl", help="inter-token latency p95 SLO, e.g. 100ms")
    p.add_argument("--slo-ttft", help="time-to-first-token p95 SLO, e.g. 2s")
    p.add_argument("--model", help="capacity preset for quantified advice, e.g. Qwen3-8B")
    p.add_argument("--gpu", help="GPU preset, e.g. H100")
    p.add_argument("--bearer-token-file", help="file holding a bearer token for the endpoint")
    p.add_argument("--insecure", action="store_true", help="skip TLS verification")
    p.add_argument("--rules", action="append", help="rule file or directory (default: the shipped pack)")
    p.set_defaults(run=run)


def _spec(args: argparse.Namespace) -> TargetSpec:
    token = None
    if args.bearer_token_file:
        try:
            with open(args.bearer_token_file, encoding="utf-8") as fh:
                token = fh.read().strip()
        except OSError as exc:
            raise ValueError(f"--bearer-token-file {args.bearer_token_file}: {exc.strerror}") from None
    url = metrics_url(args.url)
    # a misspelt preset is a usage error, not a warning the advice numbers silently lack
    for flag, name, lookup in (("--model", args.model, get_model), ("--gpu", args.gpu, get_gpu)):
        if name:
            try:
                lookup(name)
            except PresetError as exc:
                raise ValueError(f"{flag}: {exc.args[0]}") from None
    slo_itl = parse_duration(args.slo_itl) if args.slo_itl else None
    slo_ttft = parse_duration(args.slo_ttft) if args.slo_ttft else None
    http = HttpOptions(
        total_timeout=min(10.0, max(2.0, args.interval * 3)), bearer_token=token, verify=not args.insecure
    )
    return TargetSpec(
        url=url,
        max_num_seqs=args.max_num_seqs,
        slo_itl_p95_s=slo_itl,
        slo_ttft_p95_s=slo_ttft,
        model=args.model,
        gpu=args.gpu,
        http=http,
    )


def run(args: argparse.Namespace) -> int:
    """Sample, diagnose, print; 0 healthy/idle, 1 a limit was hit, 2 usage or input error, 3 no scrape worked."""
    try:
        duration = duration_seconds(args.duration)
        spec = _spec(args)
    except (ValueError, OSError) as exc:
        print(f"kvdoctor check: {exc}", file=sys.stderr)
        return 2
    if duration < WINDOW_S + args.interval:
        print(
            f"kvdoctor check: --duration {args.duration} is shorter than the {WINDOW_S:.0f} s window a verdict "
            "needs: a busy server stays `unknown`",
            file=sys.stderr,
        )
    cfg = load_config_or_exit(None)
    pipeline = build_pipeline(cfg, args.rules, recordings=[]) if cfg else None
    if pipeline is None:
        return 2
    pipeline.add_target(spec.name, target_facts(spec))
    tty = sys.stderr.isatty() and not args.json
    start = common.CLOCK.time()
    ok = errors = 0
    last_error = ""
    diagnoses: list[Diagnosis] = []
    while True:
        now = common.CLOCK.time()
        try:
            pipeline.observe(spec.name, now, fetch(spec.url, spec.http))
            ok += 1
        except ScrapeError as exc:
            errors += 1
            last_error = str(exc)
            pipeline.observe(spec.name, now, None, last_error)
        diagnoses = pipeline.evaluate(now).diagnoses
        _progress(tty, now - start, duration, diagnoses, last_error if not ok else "")
        if now - start >= duration:
            break
        common.CLOCK.wait(max(0.0, args.interval - (common.CLOCK.time() - now)))
    if tty:
        print(file=sys.stderr)
    if not ok:
        print(
            f"kvdoctor check: no successful scrape of {spec.safe_url} in {errors} tries: {last_error}",
            file=sys.stderr,
        )
        return EXIT_TRANSPORT
    if args.json:
        print(
            json.dumps(
                {
                    "target": spec.name,
                    "url": spec.safe_url,
                    "scrapes": ok,
                    "scrape_errors": errors,
                    "diagnoses": [d.to_dict() for d in diagnoses],
                }
            )
        )
    else:
        print(f"kvdoctor check of {spec.safe_url}: {ok} scrapes over {duration:.0f} s ({errors} failed)\n")
        print("\n\n".join(terminal.report(d) for d in diagnoses))
    return 1 if any(d.verdict in LIMITS for d in diagnoses) else 0


def _progress(tty: bool, elapsed: float, duration: float, diagnoses: list[Diagnosis], error: str) -> None:
    if not tty:
        return
    d = diagnoses[0] if diagnoses else None
    ev = d.evidence if d else {}
    bits = [f"{fmt.label_of(k)} {fmt.value(k, ev[k])}" for k in ("kv_usage", "running", "waiting") if k in ev]
    status = error[:60] if error else " · ".join(bits)
    line = f"\rsampling {min(elapsed, duration):4.0f}/{duration:.0f} s  {d.verdict if d else '…':9s} {status}"
    print(line.ljust(100)[:120], end="", file=sys.stderr, flush=True)
