"""`kvdoctor demo`: no GPU, no vLLM, no config: replay real vLLM recordings and watch them live."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kvdoctor import terminal
from kvdoctor.cli.common import duration_arg, interval_arg, listen_arg
from kvdoctor.config import Config, TargetSpec
from kvdoctor.config.schema import DEFAULT_LISTEN
from kvdoctor.daemon.logs import setup_logging
from kvdoctor.daemon.runner import Daemon
from kvdoctor.ingest.fetch import HttpOptions
from kvdoctor.replayserver import Playlist, ReplayServer
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.verdicts import Diagnosis

DEMO = Path(__file__).resolve().parent.parent / "demo"
# target -> recordings played one after another (looping): a healthy server that fills its KV cache and recovers,
# one pinned at --max-num-seqs, one compute bound.
STAGES = {
    "vllm-a": ["healthy", "kv_bound", "healthy"],
    "vllm-b": ["batch_cap"],
    "vllm-c": ["compute_bound"],
}


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("demo", help="watch replayed real vLLM servers hit their limits (no GPU needed)")
    p.add_argument(
        "--listen",
        type=listen_arg,
        default=None,
        help=f"status page address (default {DEFAULT_LISTEN}, or any free port when that one is taken)",
    )
    p.add_argument("--interval", type=interval_arg, default=2.0, help="time between cycles (default 2s)")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed of the recordings (default 1)")
    p.add_argument(
        "--duration",
        type=duration_arg,
        default=0.0,
        help="stop after this long, e.g. 90s (default: until Ctrl-C)",
    )
    p.set_defaults(run=run)


def _print_change(d: Diagnosis, previous: str | None) -> None:
    print(terminal.change_line(d, None, previous), flush=True)
    if d.advice and d.verdict != previous:
        print("\n".join(terminal.advice_lines(d)[:3]), flush=True)


def run(args: argparse.Namespace) -> int:
    """Start replay servers and the daemon; print each change; stop on Ctrl-C or after --duration."""

    setup_logging("text", "warning")

    servers = []
    targets = []
    for name, stages in STAGES.items():
        server = ReplayServer(
            # 5 s in: skip the idle seconds each recording starts with
            Playlist([DEMO / f"{s}.jsonl.gz" for s in stages], start_offset_s=5.0, loop=True),
            speed=args.speed,
        ).start()
        servers.append(server)
        targets.append(
            TargetSpec(url=server.url, name=name, http=HttpOptions(total_timeout=min(3.0, args.interval)))
        )
    cfg = Config(
        targets=targets, interval_s=args.interval, listen=args.listen or DEFAULT_LISTEN, retention_s=900.0
    )
    daemon = Daemon(cfg, load_files(default_rule_files()), on_change=_print_change)
    try:
        daemon.start()
    except OSError as exc:
        if args.listen:  # the address asked for: said, not swapped for another
            for server in servers:
                server.stop()
            print(f"kvdoctor demo: --listen {args.listen}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        cfg.listen = cfg.listen.rsplit(":", 1)[0] + ":0"  # the default port is taken: any free one will do
        daemon.start()
    assert daemon.web is not None  # started with web=True
    print(f"kvdoctor demo: watching {len(targets)} replayed vLLM servers (real vLLM 0.32 recordings)")
    print(
        f"status page: {daemon.web.url}   metrics: {daemon.web.url}metrics   API: {daemon.web.url}api/v1/diagnoses"
    )
    print("Ctrl-C to stop.\n", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.monotonic() + args.duration if args.duration else None
    while not stop.wait(0.5):
        if deadline and time.monotonic() >= deadline:
            break
    daemon.shutdown()
    for s in servers:
        s.stop()
    print("\nkvdoctor demo: stopped", file=sys.stderr)
    return 0
