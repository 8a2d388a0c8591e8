"""`kvdoctor replay RECORDING…`: run recordings through the diagnosis pipeline on their own clock."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kvdoctor import terminal
from kvdoctor.cli.common import build_pipeline, duration_arg, interval_arg, load_config_or_exit
from kvdoctor.cli.notify import NO_SINKS, has_sinks, notify_config
from kvdoctor.errors import EXIT_OK, EXIT_TRANSPORT
from kvdoctor.export.openmetrics import export_openmetrics
from kvdoctor.ingest.recording import RecordingError
from kvdoctor.notify import Notifier
from kvdoctor.replay import replay
from kvdoctor.verdicts import Diagnosis


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("replay", help="diagnose a recording on its own clock")
    p.add_argument(
        "recordings", nargs="+", metavar="RECORDING", help="JSON lines {t, text} (gzip ok); one target each"
    )
    p.add_argument("--json", action="store_true", help="one JSON object with every evaluation in `timeline`")
    p.add_argument(
        "--interval", type=interval_arg, default=15.0, help="time between evaluations (default 15s)"
    )
    p.add_argument(
        "--scrape-interval", type=duration_arg, default=0.0, help="thin the recording to this scrape cadence"
    )
    p.add_argument("--config", help="kvdoctor config (per-target max_num_seqs, SLOs, model; notify section)")
    p.add_argument("--rules", action="append", help="rule file or directory (default: the shipped pack)")
    p.add_argument(
        "--notify",
        action="store_true",
        help="send the notifications that would have gone out, to the sinks of the config's notify section "
        "and KVDOCTOR_SLACK_*. Slack messages carry the recording's own times. Alertmanager drops alerts that "
        "ended in the past, so it gets them moved to now: the first alert starts when the replay reaches it "
        "and later times keep their distance (an incident that lasted 5m resolves there 5m later). "
        "Exit 1 when a notification could not be delivered",
    )
    p.add_argument(
        "--notify-state",
        metavar="DIR",
        help="keep the replay's notification state (lifecycle, outbox, Slack threads) in DIR, so a replay "
        "split in parts continues its incidents (default: a fresh temporary directory; never the daemon's)",
    )
    p.add_argument("--export-openmetrics", metavar="FILE", help="write kvdoctor_* series per evaluation")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Replay and print; exit 2 on bad input, 3 when a notification was not delivered."""
    cfg = load_config_or_exit(args.config)
    if cfg is None:
        return 2
    names = [Path(r).name for r in args.recordings]
    pipeline = build_pipeline(cfg, args.rules, recordings=args.recordings)
    if pipeline is None:
        return 2
    notifier, tmp = _notifier(cfg, args.notify_state, args.interval) if args.notify else (None, None)
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
                notify_cycle(notifier, cycle.diagnoses, cycle.t)
            for d in cycle.diagnoses:
                timeline.append(_entry(d))
                key, state = (d.target, d.model_name), (d.verdict, tuple(f.name for f in d.findings))
                if not args.json and last.get(key) != state:
                    prev = last.get(key, (None,))[0]
                    print(terminal.change_line(d, start, prev))
                    if d.advice and (prev is None or prev != d.verdict):
                        print("\n".join(terminal.advice_lines(d)))
                last[key] = state
    except (RecordingError, OSError) as exc:
        print(f"kvdoctor replay: {exc}", file=sys.stderr)
        return 2
    finally:
        undelivered = notify_close(notifier, tmp) if notifier is not None else False
    if args.export_openmetrics:
        try:
            with open(args.export_openmetrics, "w", encoding="utf-8") as out:
                n = export_openmetrics(cycles, out)
        except OSError as exc:
            print(
                f"kvdoctor replay: --export-openmetrics {args.export_openmetrics}: {exc.strerror}",
                file=sys.stderr,
            )
            return 2
        print(f"wrote {n} samples to {args.export_openmetrics}", file=sys.stderr)
    if args.json:
        print(json.dumps({"recordings": names, "interval": args.interval, "timeline": timeline}))
    return EXIT_TRANSPORT if undelivered else EXIT_OK  # a sink that did not take a notification


def _entry(d: Diagnosis) -> dict[str, Any]:
    full = d.to_dict()
    return {
        "t": d.t,
        "target": d.target,
        "model_name": d.model_name,
        "bottleneck": d.verdict,
        "verdict": d.verdict,
        "since": d.since,
        "findings": [f.name for f in d.findings],
        "evidence": full["evidence"],
        "advice": full["advice"],
    }


def _notifier(cfg: Any, state: str | None, interval: float) -> tuple[Any, Path | None]:

    ncfg = notify_config(cfg, os.environ, "kvdoctor replay")
    if ncfg is None:
        return None, None
    if not has_sinks(ncfg):
        print(f"kvdoctor replay: --notify: {NO_SINKS}", file=sys.stderr)
        return None, None
    # Never the daemon's outbox (notify.outbox_path): a replay has incidents of its own.
    state_dir = Path(state) if state else Path(tempfile.mkdtemp(prefix="kvdoctor-replay-"))
    # Alerts pushed on the replay's fast clock must not outlive their own resolution in Alertmanager.
    am = dataclasses.replace(
        ncfg.alertmanager,
        ends_at_after=min(ncfg.alertmanager.ends_at_after, 2 * interval),
        job=cfg.job,
    )
    ncfg = dataclasses.replace(
        ncfg, enabled=True, outbox_path=str(state_dir / "replay-notify.sqlite"), alertmanager=am
    )
    notifier = Notifier(ncfg, state_dir, clock=time.time)
    notifier.alertmanager_offset = None
    return notifier, None if state else state_dir


def notify_cycle(notifier: Any, diagnoses: list[Diagnosis], t: float) -> None:
    """Feed one replayed cycle; Alertmanager gets every push (the replay outruns its background pusher)."""
    notifier.observe(diagnoses, t)
    am = notifier.alertmanager
    if am is not None and not am.last_error:
        am.flush(am.config.timeout + 1.0)


def notify_close(notifier: Notifier, tmp: Path | None) -> bool:
    """Deliver what is owed and print a summary on stderr; True when something could not be delivered."""
    delivered = notifier.flush(30.0)
    stats = notifier.status().outbox
    am_error = notifier.alertmanager.last_error if notifier.alertmanager else ""
    notifier.close()
    parts = []
    if notifier.slack is not None:
        parts.append(f"Slack: {stats.done} delivered, {stats.pending} pending, {stats.dead} rejected")
    if notifier.alertmanager is not None:
        parts.append(f"Alertmanager: {'failed' if am_error else 'ok'}")
    line = "kvdoctor replay: notify: " + "; ".join(parts)
    if stats.last_error or am_error:
        line += f" (last error: {stats.last_error or am_error})"
    if stats.pending and tmp is not None:
        line += f"; the owed messages are left in {tmp}"
    elif tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    print(line, file=sys.stderr)
    return not delivered or bool(stats.pending or stats.dead or am_error)
