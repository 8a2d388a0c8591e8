"""`kvdoctor config check FILE`: every error of a config and of what it names (notify, web_config, rules, file_sd,
kubeconfigs, models)."""

from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import Any

from kvdoctor.cli.common import usage
from kvdoctor.config import Config, check_config
from kvdoctor.config.filesd import read_file_sd
from kvdoctor.daemon.kubesd import kubeconfig_problem
from kvdoctor.errors import EXIT_INPUT
from kvdoctor.notify import parse_notify_config
from kvdoctor.rules.loader import RuleLoadError, load_files, rule_files
from kvdoctor.targets import target_facts
from kvdoctor.web import WebConfigError, load_web_config


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("config", help="config tools (check a config file)")
    actions = p.add_subparsers(dest="config_command", metavar="ACTION")
    c = actions.add_parser(
        "check",
        help="validate a config and every file it names",
        description="Check a kvdoctor config as `serve` would read it (KVDOCTOR_* overrides applied): the "
        "config itself, its notify section, its web_config, its rule files and the file_sd files it matches. "
        "Print every error with file:line and exit 2 (bad input, as every subcommand); print `FILE: ok` and exit 0 when all is clean.",
    )
    c.add_argument("file", help="the kvdoctor config (YAML)")
    c.set_defaults(run=run_check)
    p.set_defaults(run=lambda args: usage(p))


def config_errors(path: str) -> list[str]:
    """Every error of the config at path and of the files it names, each prefixed with where it is."""
    cfg, errors = check_config(path)
    if cfg.notify is not None or any(k.startswith("KVDOCTOR_SLACK") for k in os.environ):
        _, notify = parse_notify_config(cfg.notify, os.environ, cfg.doc)
        errors += notify
    return _in_file_order(errors + _file_errors(cfg), str(cfg.path))


def _in_file_order(errors: list[str], path: str) -> list[str]:
    """The config's own errors by line (wherever they were found), then those of the files it names."""

    def line(e: str) -> tuple[int, int]:
        head, _, rest = e.partition(":")
        num = rest.partition(":")[0]
        return (0, int(num)) if head == path and num.isdigit() else (1, 0)

    return sorted(errors, key=line)


def _file_errors(cfg: Config) -> list[str]:
    errors: list[str] = []
    if cfg.web_config:
        try:
            load_web_config(cfg.web_config)
        except WebConfigError as exc:
            errors += exc.errors
    try:
        load_files(rule_files(cfg.rules))
    except RuleLoadError as exc:
        errors += exc.errors
    for spec in cfg.targets:  # model_config files and the model/GPU presets named
        prefix = "" if spec.where() else f"{cfg.path}: "
        warned: list[str] = []
        target_facts(spec, warn=warned.append)
        errors += [prefix + m for m in warned]
    for sd in cfg.file_sd:
        for path in sorted({p for pattern in sd.files for p in glob.glob(pattern)}):
            errors += read_file_sd(path)[1]
    errors += [p for p in map(kubeconfig_problem, cfg.kubernetes_sd) if p]
    return errors


def run_check(args: argparse.Namespace) -> int:
    """0 and `FILE: ok` when the config and its files are clean; 2 (bad input) after printing every error."""
    errors = config_errors(args.file)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"{args.file}: {len(errors)} error{'s' if len(errors) > 1 else ''}", file=sys.stderr)
        return EXIT_INPUT
    print(f"{args.file}: ok")
    return 0
