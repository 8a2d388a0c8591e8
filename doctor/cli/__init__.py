"""The `kvdoctor` command: one subcommand module per job."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from doctor import __version__

# subcommand name -> module under doctor.cli (or a full module path) exposing add_parser(subparsers) and run(args)
SUBCOMMANDS = {
    "query": "doctor.cli.query",
    "replay": "doctor.cli.replay",
    "capacity": "doctor.capacity.cli",
    "check": "doctor.cli.check",
    "replay-server": "doctor.cli.replayserver",
    "serve": "doctor.cli.serve",
    "demo": "doctor.cli.demo",
    "notify": "doctor.cli.notify",
    "config": "doctor.cli.config",
    "rules": "doctor.cli.rules",
    "report": "doctor.cli.report",
    "whatif": "doctor.cli.whatif",
}


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser."""
    parser = argparse.ArgumentParser(
        prog="kvdoctor", description="Tells vLLM operators which limit they hit and what to change."
    )
    parser.add_argument("--version", action="version", version=f"kvdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run kvdoctor; returns the exit code (0 ok, 1 a limit was hit where that applies, 2 usage or input error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int((getattr(args, "run", None) or args.func)(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
