"""`kvdoctor serve`: watch vLLM targets, expose diagnoses on /metrics, the API and the status page."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kvdoctor.cli.common import interval_arg, listen_arg
from kvdoctor.config import ConfigError
from kvdoctor.config.durations import parse_duration
from kvdoctor.config.schema import Overrides, PrometheusSource, check_url
from kvdoctor.config.targets import metrics_url
from kvdoctor.daemon.logs import setup_logging
from kvdoctor.daemon.runner import Daemon, load_everything
from kvdoctor.ingest.fetch import HttpOptions


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("serve", help="run the daemon")
    p.add_argument("--config", help="YAML config (targets, SLOs, notify, …); KVDOCTOR_* env vars override")
    p.add_argument(
        "--target", action="append", default=[], metavar="URL", help="a vLLM /metrics URL (repeatable)"
    )
    # The exporter-toolkit spellings (--web.listen-address, --web.config.file, --log.format) are aliases, so a
    # command line written for node_exporter & co. works here too.
    p.add_argument(
        "--listen",
        "--web.listen-address",
        dest="listen",
        type=listen_arg,
        help="HOST:PORT for /metrics, the API and the page (default 127.0.0.1:9860)",
    )
    p.add_argument(
        "--health-listen",
        dest="health_listen",
        type=listen_arg,
        metavar="HOST:PORT",
        help="also serve GET /-/healthy and /-/ready in plain HTTP without auth here, for probes (default off)",
    )
    p.add_argument("--interval", type=interval_arg, help="time between cycles (default 15s)")
    p.add_argument("--state-file", help="where to keep pending/firing state across restarts")
    p.add_argument("--log-format", "--log.format", dest="log_format", choices=("text", "json"))
    p.add_argument("--rules", action="append", help="rule file or directory (default: the shipped pack)")
    p.add_argument(
        "--web-config",
        "--web.config.file",
        dest="web_config",
        help="exporter-toolkit web-config.yml (TLS, basic auth)",
    )
    p.add_argument(
        "--external-url",
        "--web.external-url",
        dest="external_url",
        metavar="URL",
        help="the URL users reach kvdoctor at (behind a proxy); links in alerts start with it (default: from --listen)",
    )
    p.add_argument(
        "--runbook-url",
        metavar="URL",
        help="the runbook page alerts link to, #<finding> appended (default: <external URL>/runbook, served here)",
    )
    add_source_arguments(p)
    p.set_defaults(run=run)


def add_source_arguments(p: argparse.ArgumentParser, with_source: bool = True) -> None:
    """--source and the Prometheus connection flags (they replace the config's `prometheus:` section)."""
    title = "run on the fleet's Prometheus instead of scraping" if with_source else "read from Prometheus"
    g = p.add_argument_group(f"prometheus source ({title})")
    implies = " (implies --source prometheus)" if with_source else ""
    if with_source:
        g.add_argument(
            "--source", choices=("scrape", "prometheus"), help="where series come from (default scrape)"
        )
    g.add_argument(
        "--prometheus-url",
        metavar="URL",
        help=f"query API base, e.g. http://prometheus:9090{implies}",
    )
    g.add_argument("--prometheus-bearer-token-file", metavar="FILE", help="file holding a bearer token")
    g.add_argument(
        "--prometheus-basic-auth-user", metavar="USER", help="basic-auth user (password from the file below)"
    )
    g.add_argument(
        "--prometheus-basic-auth-password-file", metavar="FILE", help="file holding the basic-auth password"
    )
    g.add_argument(
        "--prometheus-header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="extra request header (repeatable), e.g. X-Scope-OrgID:tenant",
    )
    g.add_argument("--prometheus-ca-file", metavar="FILE", help="CA bundle to verify the server with")
    g.add_argument(
        "--prometheus-cert-file", metavar="FILE", help="client certificate (with --prometheus-key-file)"
    )
    g.add_argument("--prometheus-key-file", metavar="FILE", help="client key")
    g.add_argument(
        "--prometheus-insecure-skip-verify",
        action="store_true",
        help="do not verify the server's certificate",
    )
    g.add_argument("--prometheus-timeout", metavar="DURATION", help="per-query timeout (default 10s)")


def prometheus_source(args: argparse.Namespace) -> PrometheusSource | None:
    """The `prometheus:` section given by flags (None without --prometheus-url); raises ConfigError."""
    flags = [
        a for a in vars(args) if a.startswith("prometheus_") and a != "prometheus_url" and getattr(args, a)
    ]
    if not args.prometheus_url:
        if flags:
            raise ConfigError([f"--{flags[0].replace('_', '-')} needs --prometheus-url"])
        return None
    errors: list[str] = []

    def read(path: str | None, what: str) -> str | None:
        if path is None:
            return None
        try:
            return Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            errors.append(f"{what}: cannot read {path}: {exc.strerror or exc}")
            return None

    token = read(args.prometheus_bearer_token_file, "--prometheus-bearer-token-file")
    password = read(args.prometheus_basic_auth_password_file, "--prometheus-basic-auth-password-file")
    headers = []
    for h in args.prometheus_header:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            errors.append(f"--prometheus-header: expected NAME:VALUE, got {h.split(':')[0]!r}")
        headers.append((name.strip(), value.strip()))
    timeout = 10.0
    if args.prometheus_timeout:
        try:
            timeout = parse_duration(args.prometheus_timeout)
        except ValueError:
            errors.append(f"--prometheus-timeout: not a duration: {args.prometheus_timeout!r}")
    if bool(args.prometheus_cert_file) != bool(args.prometheus_key_file):
        errors.append("--prometheus-cert-file and --prometheus-key-file go together")
    if errors:
        raise ConfigError(errors)
    verify: bool | str = args.prometheus_ca_file or True
    if args.prometheus_insecure_skip_verify:
        verify = False
    cert = (args.prometheus_cert_file, args.prometheus_key_file) if args.prometheus_cert_file else None
    basic = (args.prometheus_basic_auth_user, password or "") if args.prometheus_basic_auth_user else None
    http = HttpOptions(
        connect_timeout=min(3.0, timeout),
        read_timeout=timeout,
        total_timeout=timeout,
        bearer_token=token,
        basic_auth=basic,
        verify=verify,
        client_cert=cert,
        headers=tuple(headers),
    )
    return PrometheusSource(args.prometheus_url, http)


def overrides(args: argparse.Namespace) -> Overrides:
    """Config fields set on the command line."""
    prometheus = prometheus_source(args)
    return Overrides(
        listen=args.listen,
        health_listen=args.health_listen,
        interval_s=args.interval,
        state_file=args.state_file,
        log_format=args.log_format,
        rules=args.rules,
        web_config=args.web_config,
        external_url=_url(args.external_url, "--external-url"),
        runbook_url=_url(args.runbook_url, "--runbook-url"),
        targets=tuple(metrics_url(u) for u in args.target) if args.target else None,
        prometheus=prometheus,
        source=args.source or ("prometheus" if prometheus else None),
    )


def _url(url: str | None, flag: str) -> str | None:
    problem = check_url(url, flag) if url is not None else None
    if problem:
        raise ConfigError([problem])
    return url


def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM; a bad config or rule file (InputError: 2), Prometheus not answering (3): cli.main."""

    try:
        flags = overrides(args)
        cfg, groups = load_everything(args.config, flags)
        if cfg.source == "prometheus" and cfg.prometheus is None:
            raise ConfigError(
                ["source `prometheus` needs --prometheus-url (or `prometheus.url` in the config)"]
            )
        setup_logging(cfg.log_format, cfg.log_level)
        daemon = Daemon(cfg, groups, args.config, flags)
        daemon.handle_signals()
        daemon.start()
    except OSError as exc:
        print(f"kvdoctor serve: cannot listen on {cfg.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if cfg.source == "scrape" and not cfg.targets and not cfg.file_sd and not cfg.kubernetes_sd:
        print(
            "kvdoctor serve: no targets yet (use --target URL, `targets:`, `file_sd:` or `kubernetes_sd:` in the config)",
            file=sys.stderr,
        )
    return daemon.serve_forever()
