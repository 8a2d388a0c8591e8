"""`kvdoctor report`: the capacity review — time at each limit, idle hours, tokens, cost, replicas needed."""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from kvdoctor.cli.common import build_pipeline, existing, load_config_or_exit
from kvdoctor.cli.serve import add_source_arguments, prometheus_source
from kvdoctor.config.durations import duration_seconds, parse_duration
from kvdoctor.query import recording_instance
from kvdoctor.report.build import build_report
from kvdoctor.report.collect import from_recordings
from kvdoctor.report.document import Report, scrubbed
from kvdoctor.report.economics import Prices, parse_usd
from kvdoctor.report.history import History
from kvdoctor.report.markdown import render_markdown
from kvdoctor.report.page import render_html
from kvdoctor.report.planned import planned
from kvdoctor.report.promrange import from_prometheus, progress_bar
from kvdoctor.sources.client import PromClient
from kvdoctor.whatif.slo import parse_slos

FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".json": "json"}


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser(
        "report",
        help="capacity review: hours at each limit, idle hours, tokens, cost per 1M tokens, replicas needed",
        description="Build a capacity review from recordings or from a Prometheus holding kvdoctor's series.",
    )
    p.add_argument("recordings", nargs="*", metavar="RECORDING", help="recordings, one target each (gzip ok)")
    p.add_argument(
        "--since", metavar="DURATION", help="with --prometheus-url: the range ending now (default 7d)"
    )
    p.add_argument("--start", metavar="TIME", help="range start: unix seconds or RFC 3339")
    p.add_argument("--end", metavar="TIME", help="range end: unix seconds or RFC 3339 (default now)")
    p.add_argument("--step", metavar="DURATION", help="evaluation step (default 60s; 15s for recordings)")
    p.add_argument(
        "-o", "--output", metavar="FILE", help="write here (default stdout); the suffix picks the format"
    )
    p.add_argument("--format", choices=("html", "md", "json"), help="default: from -o's suffix, else md")
    p.add_argument("--target", action="append", metavar="NAME", help="report only these targets (repeatable)")
    p.add_argument(
        "--target-name",
        action="append",
        default=[],
        metavar="[FILE=]NAME",
        help="recordings: the target they were recorded from, for all of them or (FILE=NAME, repeatable) one; "
        "over a NAME.target sidecar, so files of one target are charged as that one target",
    )
    p.add_argument("--gpu-hour-cost", metavar="USD", help="price of one GPU-hour in US dollars, e.g. 2.49")
    p.add_argument(
        "--gpus-per-target", type=int, default=1, metavar="N", help="GPUs behind each target (default 1)"
    )
    p.add_argument("--api-price-in", metavar="USD", help="API price per 1M prompt tokens, for the break-even")
    p.add_argument(
        "--api-price-out", metavar="USD", help="API price per 1M generation tokens, for the break-even"
    )
    p.add_argument(
        "--headroom", type=float, default=0.2, help="spare capacity kept when sizing (default 0.2)"
    )
    p.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="NAME=DURATION",
        help="recordings: also what `kvdoctor plan`'s configuration holding this SLO would have cost, "
        "hour by hour (e.g. ttft_p95=2s; repeatable)",
    )
    p.add_argument("--config", help="kvdoctor config (per-target max_num_seqs, SLOs) for recordings")
    p.add_argument("--rules", action="append", help="rule file or directory (default: the shipped pack)")
    add_source_arguments(p, with_source=False)
    p.set_defaults(run=run)


def parse_time(flag: str, text: str) -> float:
    """Unix seconds or RFC 3339 (2026-11-30T00:00:00Z); raises ValueError naming the flag."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{flag} {text!r}: expected unix seconds or RFC 3339, e.g. 2026-11-30T00:00:00Z"
        ) from None
    if dt.tzinfo is None:
        raise ValueError(f"{flag} {text!r}: give a time zone (e.g. a trailing Z for UTC)")
    return dt.timestamp()


def prices(args: argparse.Namespace) -> Prices:
    """The prices from the flags; raises ValueError on a price with a unit or currency."""

    def usd(flag: str, v: str | None) -> float | None:
        return parse_usd(flag, v) if v is not None else None

    api_in, api_out = usd("--api-price-in", args.api_price_in), usd("--api-price-out", args.api_price_out)
    if (api_in is None) != (api_out is None):
        raise ValueError(
            "--api-price-in and --api-price-out go together (USD per 1M prompt / generation tokens)"
        )
    if args.gpus_per_target < 1:
        raise ValueError(f"--gpus-per-target {args.gpus_per_target}: must be at least 1")
    if not 0 <= args.headroom < 1:
        raise ValueError(f"--headroom {args.headroom}: must be in [0, 1)")
    return Prices(
        usd("--gpu-hour-cost", args.gpu_hour_cost), args.gpus_per_target, api_in, api_out, args.headroom
    )


def target_names(given: list[str], recordings: list[str]) -> dict[str, str]:
    """Recording path -> target name from the --target-name flags; raises ValueError naming the flag."""
    if given and not recordings:
        raise ValueError("--target-name names the target of recordings given on the command line")
    names: dict[str, str] = {}
    every: str | None = None
    for flag in given:
        path, sep, name = flag.rpartition("=")
        if sep and path not in recordings:
            raise ValueError(f"--target-name {flag!r}: {path!r} is not one of the recordings given")
        if not name.strip() or any(c.isspace() for c in name):
            raise ValueError(
                f"--target-name {flag!r}: expected a target name without spaces, e.g. vllm-0:8000"
            )
        if not sep:
            if every is not None:
                raise ValueError(
                    f"--target-name {flag!r}: a name for all recordings was given already ({every})"
                )
            every = name
        elif names.setdefault(path, name) != name:
            raise ValueError(f"--target-name {flag!r}: {path} was named {names[path]} already")
    if every is not None:
        for r in recordings:
            names.setdefault(r, every)
    return names


def _history(args: argparse.Namespace, step: float | None, names: dict[str, str]) -> History | None:
    if args.recordings and args.prometheus_url:
        raise ValueError("give recordings or --prometheus-url, not both")
    if args.recordings:
        missing = existing(args.recordings)
        if missing:
            raise ValueError(f"{missing[0]}: no such file")
        cfg = load_config_or_exit(args.config)
        pipeline = (
            build_pipeline(cfg, args.rules, recordings=args.recordings, names=names, books_only=True)
            if cfg
            else None
        )
        if pipeline is None:
            return None
        return from_recordings(pipeline, args.recordings, step or 15.0, names=names)
    source = prometheus_source(args)
    if source is None:
        raise ValueError("give RECORDING… or --prometheus-url URL")
    end = parse_time("--end", args.end) if args.end else time.time()
    if args.start:
        if args.since:
            raise ValueError("--since and --start exclude each other")
        start = parse_time("--start", args.start)
    else:
        try:
            start = end - parse_duration(args.since or "7d")
        except ValueError:
            raise ValueError(f"--since {args.since!r}: expected a duration such as 7d or 36h") from None
    if end <= start:
        raise ValueError(f"--end must be after --start ({end:.0f} ≤ {start:.0f})")
    bar = progress_bar() if sys.stderr.isatty() else None  # `\r` redraws would litter a CI log or `2> file`
    return from_prometheus(PromClient(source.url, source.http), start, end, step or 60.0, bar)


def _check_output(path: Path) -> None:
    """Refuse an output path whose folder is missing or not writable, as writing it would."""
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"-o {path}: {os.strerror(errno.ENOENT)}")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"-o {path}: {os.strerror(errno.EACCES)}")


def run(args: argparse.Namespace) -> int:
    """Build and write the report; exit 2 on bad input."""
    try:
        p = prices(args)
        step = duration_seconds(args.step) if args.step else None
        if step is not None and step <= 0:
            raise ValueError(f"--step {args.step}: must be positive")
        suffix = Path(args.output).suffix.lower() if args.output else ""
        if args.output and not args.format and suffix not in FORMATS:
            raise ValueError(
                f"-o {args.output}: the suffix picks the format, give .html, .md or .json (or --format)"
            )
        fmt = args.format or FORMATS.get(suffix, "md")
        if args.output:
            _check_output(Path(args.output))  # before the replay, which can take minutes on a fleet
        slos = parse_slos(args.slo) if args.slo else {}
        if slos and not args.recordings:
            raise ValueError("--slo: the planned cost is computed from recordings, not --prometheus-url")
        names = target_names(args.target_name, args.recordings)
        history = _history(args, step, names)
        if history is None:
            return 2
        doc = build_report(history, p, args.target)
        if slos:
            by_target: dict[str, list[Path]] = {}
            for r in args.recordings:
                by_target.setdefault(recording_instance(r, names), []).append(Path(r))
            doc = planned(doc, by_target, slos, p)
        doc = scrubbed(doc)  # a value no JSON holds is left out, not a crash
    except (ValueError, OSError) as exc:  # InputError is a ValueError; a TransportError goes to cli.main (3)
        print(f"kvdoctor report: {exc}", file=sys.stderr)
        return 2
    renderers: dict[str, Callable[[Report], str]] = {
        "json": lambda d: json.dumps(d.to_json(), indent=1) + "\n",
        "md": render_markdown,
        "html": render_html,
    }
    text = renderers[fmt](doc)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            print(f"kvdoctor report: -o {args.output}: {exc.strerror}", file=sys.stderr)
            return 2
        print(f"kvdoctor report: wrote {args.output} ({fmt})", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
