"""The `kvdoctor` command: one subcommand module per job."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kvdoctor import __version__
from kvdoctor.errors import (
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TRANSPORT,
    InputError,
    TransportError,
    ValidationError,
)

# subcommand name -> module under kvdoctor.cli (or a full module path) exposing add_parser(subparsers) and run(args)
SUBCOMMANDS = {
    "query": "kvdoctor.cli.query",
    "replay": "kvdoctor.cli.replay",
    "capacity": "kvdoctor.cli.capacity",
    "check": "kvdoctor.cli.check",
    "replay-server": "kvdoctor.cli.replayserver",
    "serve": "kvdoctor.cli.serve",
    "demo": "kvdoctor.cli.demo",
    "notify": "kvdoctor.cli.notify",
    "config": "kvdoctor.cli.config",
    "rules": "kvdoctor.cli.rules",
    "report": "kvdoctor.cli.report",
    "whatif": "kvdoctor.cli.whatif",
    "plan": "kvdoctor.cli.plan",
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser: every subcommand's, or only the one argv names (its imports alone)."""
    parser = argparse.ArgumentParser(
        prog="kvdoctor", description="Tells vLLM operators which limit they hit and what to change."
    )
    parser.add_argument("--version", action="version", version=f"kvdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # the daemon's, Slack's and HTTP's libraries cost a recording-only command a quarter of its start-up
    named = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    for module in (SUBCOMMANDS[named],) if named else SUBCOMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def report_error(command: str, exc: InputError | TransportError) -> None:
    """The error on stderr without a traceback: one line, or one per problem of a ValidationError."""
    lines = exc.errors if isinstance(exc, ValidationError) else [" ".join(str(exc).split())]
    for line in lines:
        print(f"kvdoctor {command}: {line}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run kvdoctor; returns the exit code (README "Exit codes": 0 ok, 1 found, 2 input, 3 transport)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return EXIT_INPUT
    try:
        return int((getattr(args, "run", None) or args.func)(args))
    except InputError as exc:
        report_error(args.command, exc)
        return EXIT_INPUT
    except TransportError as exc:
        report_error(args.command, exc)
        return EXIT_TRANSPORT
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
