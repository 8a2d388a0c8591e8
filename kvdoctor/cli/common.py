"""Pieces several subcommands share: loading config and rules (printing every error), building a pipeline."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from kvdoctor.config import Config, ConfigError, load_config
from kvdoctor.config.durations import EXAMPLES, parse_duration
from kvdoctor.config.schema import parse_listen
from kvdoctor.pipeline import Pipeline
from kvdoctor.rules.loader import RuleGroup, RuleLoadError, load_files, rule_files
from kvdoctor.targets import pipeline_for
from kvdoctor.whatif.advisor import Advisor


class Clock(Protocol):
    """What sampling a live server reads and waits on."""

    def time(self) -> float: ...

    def wait(self, seconds: float) -> None: ...


class WallClock:
    """The real clock: `time.time` and `time.sleep`."""

    def time(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def wait(self, seconds: float) -> None:
        """Wait that long."""
        time.sleep(seconds)


# `check` and `whatif URL` sample on this; tests swap in a clock that advances when it is asked to wait
CLOCK: Clock = WallClock()


def duration_arg(text: str) -> float:
    """argparse type of every duration flag: the config's grammar (`2`, `1.5s`, `500ms`, `1h30m`), in seconds."""
    try:
        return parse_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (give one {EXAMPLES})") from None


def interval_arg(text: str) -> float:
    """argparse type of a cadence flag: a duration above zero (0 would loop without advancing)."""
    seconds = duration_arg(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be above zero, got {text!r}")
    return seconds


def listen_arg(text: str) -> str:
    """argparse type of --listen: HOST:PORT, checked before anything starts."""
    try:
        parse_listen(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}") from None
    return text


def positive_int_arg(text: str) -> int:
    """argparse type of a count flag such as --max-num-seqs: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def load_config_or_exit(path: str | None) -> Config | None:
    """The config, or None after printing every error."""
    try:
        return load_config(path)
    except ConfigError as exc:
        for e in exc.errors:
            print(f"kvdoctor: {e}", file=sys.stderr)
        return None


def load_rules(cfg: Config, override: list[str] | None) -> list[RuleGroup] | None:
    """The rule groups, or None after printing every error."""
    try:
        return load_files(rule_files(override or cfg.rules))
    except RuleLoadError as exc:
        for e in exc.errors:
            print(f"kvdoctor: {e}", file=sys.stderr)
        return None


def build_pipeline(
    cfg: Config,
    rules: list[str] | None,
    recordings: list[str] | None = None,
    names: Mapping[str, str] | None = None,
    books_only: bool = False,
    judged_from: float = -math.inf,
) -> Pipeline | None:
    """A pipeline with the config's targets declared, or None after printing every rule error (`books_only`: the
    advisor simulates only what a verdict needs, the relief check, as the report's books read no advice;
    `judged_from`: and only from then)."""
    groups = load_rules(cfg, rules)
    # replay and check predict the advice's effects inline, on the recording's clock
    advisor = Advisor(books_only=books_only, judged_from=judged_from)
    return None if groups is None else pipeline_for(cfg, groups, recordings, advisor=advisor, names=names)


def existing(paths: list[str]) -> list[str]:
    """Paths that do not exist, for a usage error."""
    return [p for p in paths if not Path(p).exists()]


def usage(p: argparse.ArgumentParser) -> int:
    """Print a subcommand group's help on stderr and return 2 (an action is missing)."""
    p.print_help(sys.stderr)
    return 2
