"""`kvdoctor replay RECORDING…`: run recordings through the diagnosis pipeline on their own clock."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from doctor import render
from doctor.cli.common import build_pipeline, load_config_or_exit
from doctor.diagnosis.model import Diagnosis
from doctor.ingest.recording import RecordingError
from doctor.replay import replay


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("replay", help="diagnose a recording on its own clock")
    p.add_argument(
        "recordings", nargs="+", metavar="RECORDING", help="JSON lines {t, text} (gzip ok); one target each"
    )
    p.add_argument("--json", action="store_true", help="one JSON object with every evaluation in `timeline`")
    p.add_argument("--interval", type=float, default=15.0, help="seconds between evaluations (default 15)")
    p.add_argument(
        "--scrape-interval", type=float, default=0.0, help="thin the recording to this scrape cadence"
    )
    p.add_argument("--config", help="kvdoctor config (per-target max_num_seqs, SLOs, model; notify section)")
    p.add_argument("--rules", action="append", help="rule file or directory (default: the shipped pack)")
    p.add_argument("--notify", action="store_true", help="send the notifications that would have gone out")
    p.add_argument("--export-openmetrics", metavar="FILE", help="write kvdoctor_* series per evaluation")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Replay and print; exit 2 on bad input."""
    cfg = load_config_or_exit(args.config)
    if cfg is None:
        return 2
    names = [Path(r).name for r in args.recordings]
    pipeline = build_pipeline(cfg, args.rules, recordings=args.recordings)
    if pipeline is None:
        return 2
    notifier = _notifier(cfg) if args.notify else None
    if args.notify and notifier is None:
        return 2
    cycles = []
    timeline: list[dict[str, Any]] = []
    last: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}
    start: float | None = None
    try:
        for cycle in replay(pipeline, args.recordings, args.interval, args.scrape_interval):
            start = cycle.t if start is None else start
            if args.export_openmetrics:
                cycles.append(cycle)
            if notifier is not None:
                notifier.observe(cycle.diagnoses, cycle.t)
            for d in cycle.diagnoses:
                timeline.append(_entry(d))
                key, state = (d.target, d.model_name), (d.bottleneck, tuple(f.name for f in d.findings))
                if not args.json and last.get(key) != state:
                    prev = last.get(key, (None,))[0]
                    print(render.change_line(d, start, prev))
                    if d.advice and (prev is None or prev != d.bottleneck):
                        print("\n".join(render.advice_lines(d)))
                last[key] = state
    except (RecordingError, OSError) as exc:
        print(f"kvdoctor replay: {exc}", file=sys.stderr)
        return 2
    finally:
        if notifier is not None:
            notifier.flush(30.0)
            notifier.close()
    if args.export_openmetrics:
        from doctor.export.openmetrics import export_openmetrics

        with open(args.export_openmetrics, "w", encoding="utf-8") as out:
            n = export_openmetrics(cycles, out)
        print(f"wrote {n} samples to {args.export_openmetrics}", file=sys.stderr)
    if args.json:
        print(json.dumps({"recordings": names, "interval": args.interval, "timeline": timeline}))
    return 0


def _entry(d: Diagnosis) -> dict[str, Any]:
    full = d.to_dict()
    return {
        "t": d.t,
        "target": d.target,
        "model_name": d.model_name,
        "bottleneck": d.bottleneck,
        "since": d.since,
        "findings": [f.name for f in d.findings],
        "evidence": full["evidence"],
        "advice": full["advice"],
    }


def _notifier(cfg: Any) -> Any:
    from doctor.notify import Notifier, parse_notify_config

    ncfg, errors = parse_notify_config(cfg.notify, {})
    if errors:
        for e in errors:
            print(f"kvdoctor replay: {cfg.path or 'config'}: {e}", file=sys.stderr)
        return None
    return Notifier(ncfg, tempfile.mkdtemp(prefix="kvdoctor-replay-"), clock=lambda: 0.0)
