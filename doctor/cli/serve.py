"""`kvdoctor serve`: watch vLLM targets, expose diagnoses on /metrics, the API and the status page."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from doctor.config import ConfigError
from doctor.config.schema import TargetSpec
from doctor.daemon.logs import setup_logging
from doctor.rules.loader import RuleLoadError


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("serve", help="run the daemon")
    p.add_argument("--config", help="YAML config (targets, SLOs, notify, …); KVDOCTOR_* env vars override")
    p.add_argument(
        "--target", action="append", default=[], metavar="URL", help="a vLLM /metrics URL (repeatable)"
    )
    p.add_argument("--listen", help="HOST:PORT for /metrics, the API and the page (default 127.0.0.1:9860)")
    p.add_argument("--interval", type=float, help="seconds between cycles (default 15)")
    p.add_argument("--state-file", help="where to keep pending/firing state across restarts")
    p.add_argument("--log-format", choices=("text", "json"))
    p.add_argument("--rules", action="append", help="rule file or directory (default: the shipped pack)")
    p.add_argument("--web-config", help="exporter-toolkit web-config.yml (TLS, basic auth)")
    p.set_defaults(run=run)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Config fields set on the command line."""
    out: dict[str, Any] = {
        "listen": args.listen, "interval_s": args.interval, "state_file": args.state_file,
        "log_format": args.log_format, "rules": args.rules, "web_config": args.web_config,
    }  # fmt: skip
    if args.target:
        out["targets"] = [TargetSpec(url=u if "://" in u else f"http://{u}/metrics") for u in args.target]
    return out


def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM; exit 2 on a bad config or rule file."""
    from doctor.daemon.runner import Daemon, load_everything

    try:
        cfg, groups = load_everything(args.config, overrides(args))
        setup_logging(cfg.log_format, cfg.log_level)
        daemon = Daemon(cfg, groups, args.config, overrides(args))
        daemon.start()
    except (ConfigError, RuleLoadError) as exc:
        for e in str(exc).splitlines():
            print(f"kvdoctor serve: {e}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"kvdoctor serve: cannot listen on {cfg.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if not cfg.targets and not cfg.file_sd:
        print(
            "kvdoctor serve: no targets yet (use --target URL, `targets:` or `file_sd:` in the config)",
            file=sys.stderr,
        )
    return daemon.serve_forever()
