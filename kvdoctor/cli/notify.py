"""`kvdoctor notify test`: send a test message to every configured sink; the notify config helper."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from kvdoctor.cli.common import load_config_or_exit, usage
from kvdoctor.config import Config
from kvdoctor.errors import EXIT_OK, EXIT_TRANSPORT
from kvdoctor.notify import Notifier
from kvdoctor.notify.config import NotifyConfig, parse_notify_config

NO_SINKS = (
    "no notification sinks configured: set notify.slack (token + channel, or webhook_url), "
    "notify.alertmanager.url, or KVDOCTOR_SLACK_TOKEN + KVDOCTOR_SLACK_CHANNEL / KVDOCTOR_SLACK_WEBHOOK_URL"
)


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("notify", help="notification tools (send a test message)")
    actions = p.add_subparsers(dest="notify_command", metavar="ACTION")
    t = actions.add_parser(
        "test",
        help="send a test message to every configured sink",
        description="Send a test message to every sink in the config's notify section and the KVDOCTOR_SLACK_* "
        "environment (Slack bot or webhook, each Alertmanager); print one redacted line per sink. "
        "Exit 0 when all succeeded, 1 when one failed, 2 on config errors or when no sink is configured.",
    )
    t.add_argument("--config", help="kvdoctor config with a notify: section")
    t.set_defaults(run=run_test)
    p.set_defaults(run=lambda args: usage(p))


def notify_config(cfg: Config, env: Mapping[str, str], prog: str) -> NotifyConfig | None:
    """The notify config from cfg and env, or None after printing every error with its file:line."""
    ncfg, errors = parse_notify_config(cfg.notify, env, cfg.doc)
    for e in errors:
        print(f"{prog}: {e}", file=sys.stderr)
    return None if errors else ncfg


def has_sinks(ncfg: NotifyConfig) -> bool:
    """True when at least one sink (Slack or an Alertmanager) is configured."""
    return bool(ncfg.slack.mode or ncfg.alertmanager.urls)


def run_test(args: argparse.Namespace) -> int:
    """Send the test message; 0 all ok, 2 config error or nothing configured, 3 a sink did not take it."""

    cfg = load_config_or_exit(args.config)
    if cfg is None:
        return 2
    ncfg = notify_config(cfg, os.environ, "kvdoctor notify test")
    if ncfg is None:
        return 2
    if not has_sinks(ncfg):
        print(f"kvdoctor notify test: {NO_SINKS}", file=sys.stderr)
        return 2
    if not ncfg.enabled:
        print("kvdoctor notify test: note: notify.enabled is false; sending the test anyway", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="kvdoctor-notify-test-") as state:
        notifier = Notifier(ncfg, state, start=False)
        try:
            results = notifier.send_test_message()
        finally:
            notifier.close()
    for _, line in results:
        print(line)
    return EXIT_OK if all(ok for ok, _ in results) else EXIT_TRANSPORT
