"""`kvdoctor replay-server RECORDING… --listen HOST:PORT`: serve recordings as a live vLLM /metrics."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from kvdoctor.cli.common import duration_arg
from kvdoctor.config.schema import parse_listen
from kvdoctor.replayserver import Playlist, ReplayServer


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("replay-server", help="serve recordings as a live vLLM /metrics endpoint")
    p.add_argument("recordings", nargs="+", metavar="RECORDING", help="played one after another")
    p.add_argument("--listen", default="127.0.0.1:8000", help="HOST:PORT (default 127.0.0.1:8000)")
    p.add_argument(
        "--from",
        dest="start",
        type=duration_arg,
        default=0.0,
        help="start this far into the playlist, e.g. 90s",
    )
    p.add_argument("--speed", type=float, default=1.0, help="playback speed (default 1)")
    p.add_argument("--loop", action="store_true", help="start again at the end")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM (or the end of a non-looping playlist)."""
    if args.speed <= 0:
        print("kvdoctor replay-server: --speed must be positive", file=sys.stderr)
        return 2
    try:
        playlist = Playlist(args.recordings, args.start, args.loop)
    except (OSError, ValueError) as exc:  # a RecordingError is a ValueError (InputError)
        print(f"kvdoctor replay-server: {exc}", file=sys.stderr)
        return 2
    try:
        parse_listen(args.listen)
        server = ReplayServer(playlist, args.listen, args.speed)
    except ValueError:
        print(f"kvdoctor replay-server: --listen {args.listen!r}: expected HOST:PORT", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"kvdoctor replay-server: --listen {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    print(f"serving {len(playlist.frames)} frames ({playlist.length:.0f} s) at {server.url}", file=sys.stderr)
    while not stop.wait(1.0):
        if not args.loop and server.current() is None:
            break
    server.stop()
    return 0
