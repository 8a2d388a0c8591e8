"""`kvdoctor rules export`: the rule pack for a Prometheus (rule file) or the Prometheus Operator (PrometheusRule)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from kvdoctor.config.durations import format_duration, parse_duration
from kvdoctor.config.schema import check_url, runbook_page
from kvdoctor.rules.loader import RuleLoadError, load_files, rule_files
from kvdoctor.verdicts import RUNBOOK_PATH

FORMATS = ("prometheus", "prometheus-operator")


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("rules", help="work with the rule pack (export it for Prometheus)")
    actions = p.add_subparsers(dest="rules_command", metavar="ACTION", required=True)
    e = actions.add_parser("export", help="write the rule pack as a Prometheus rule file or a PrometheusRule")
    e.add_argument(
        "--format", choices=FORMATS, default="prometheus", help="rule file (default) or PrometheusRule"
    )
    e.add_argument("-o", "--output", metavar="DIR", help="write into DIR (created) instead of stdout")
    e.add_argument(
        "--rules", action="append", help="rule file or directory to export (default: the shipped pack)"
    )
    e.add_argument("--name", default="kvdoctor", help="PrometheusRule metadata.name (default kvdoctor)")
    e.add_argument("--namespace", help="PrometheusRule metadata.namespace")
    e.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="PrometheusRule metadata label (repeatable), e.g. release=prometheus for the operator's ruleSelector",
    )
    e.add_argument("--interval", metavar="DURATION", help="override every group's evaluation interval")
    e.add_argument(
        "--runbook-url",
        metavar="URL",
        help="write runbook_url links absolute: URL#<finding>, e.g. http://kvdoctor:9860/runbook (a bare server URL "
        "gets /runbook); without it they stay paths on kvdoctor's web server",
    )
    p.set_defaults(run=run)


class _Dumper(yaml.SafeDumper):
    """Multi-line expressions as literal blocks, so the export reads like the pack."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(doc: Any) -> str:
    """YAML text of doc, keys in their given order."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def groups_of(files: list[Path], interval: str | None = None) -> list[dict[str, Any]]:
    """The groups of every file, in order, as plain data (intervals overridden when asked)."""
    groups: list[dict[str, Any]] = []
    for f in files:
        doc = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
        groups += doc.get("groups") or []
    if interval:
        groups = [{**g, "interval": interval} for g in groups]
    return groups


def prometheus_rule(
    groups: list[dict[str, Any]], name: str, namespace: str | None, labels: dict[str, str]
) -> dict[str, Any]:
    """A monitoring.coreos.com/v1 PrometheusRule carrying the groups."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {"app.kubernetes.io/name": "kvdoctor", "app.kubernetes.io/component": "rules", **labels}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": meta,
        "spec": {"groups": groups},
    }


_RUNBOOK_LINK = re.compile(r"""(runbook_url:\s*["']?)""" + re.escape(RUNBOOK_PATH) + r"(?=[#\"'\s]|$)", re.M)


def link_runbooks(text: str, page: str | None) -> str:
    """The rule file text with kvdoctor's `/runbook#…` links made absolute on page (unchanged without one)."""
    return text if page is None else _RUNBOOK_LINK.sub(lambda m: m.group(1) + page, text)


def _linked(groups: list[dict[str, Any]], page: str | None) -> list[dict[str, Any]]:
    if page is None:
        return groups
    for g in groups:
        for r in g.get("rules") or []:
            url = (r.get("annotations") or {}).get("runbook_url")
            if isinstance(url, str) and (url == RUNBOOK_PATH or url.startswith(RUNBOOK_PATH + "#")):
                r["annotations"]["runbook_url"] = page + url[len(RUNBOOK_PATH) :]
    return groups


def exported_files(args: argparse.Namespace) -> dict[str, str]:
    """File name -> text of what to export; raises ValueError/RuleLoadError on bad input."""
    files = rule_files(args.rules)
    load_files(files)  # every error at file:line before anything is written
    interval = (
        format_duration(parse_duration(args.interval)) if args.interval else None
    )  # Prometheus' spelling
    page = None
    if args.runbook_url is not None:
        problem = check_url(args.runbook_url, "--runbook-url")
        if problem:
            raise ValueError(problem)
        page = runbook_page(args.runbook_url)
    labels = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--label: expected KEY=VALUE, got {item!r}")
        labels[key] = value
    if args.format == "prometheus-operator":
        doc = prometheus_rule(_linked(groups_of(files, interval), page), args.name, args.namespace, labels)
        return {f"{args.name}.prometheusrule.yaml": dump(doc)}
    if len(files) == 1 and not interval:  # verbatim: comments are documentation
        return {files[0].name: link_runbooks(files[0].read_text(encoding="utf-8"), page)}
    if args.output and not args.interval:
        return {f.name: link_runbooks(f.read_text(encoding="utf-8"), page) for f in files}
    return {"kvdoctor.yml": dump({"groups": _linked(groups_of(files, interval), page)})}


def run(args: argparse.Namespace) -> int:
    """Export; exit 2 on a bad rule file or argument."""
    try:
        out = exported_files(args)
    except RuleLoadError as exc:
        for e in exc.errors:
            print(f"kvdoctor rules export: {e}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"kvdoctor rules export: {exc}", file=sys.stderr)
        return 2
    if args.runbook_url is None and any(_RUNBOOK_LINK.search(text) for text in out.values()):
        print(
            f"kvdoctor rules export: note: runbook_url links are paths on kvdoctor ({RUNBOOK_PATH}#…); "
            "add --runbook-url URL-of-kvdoctor so Alertmanager's links open",
            file=sys.stderr,
        )
    if not args.output:
        sys.stdout.write("\n---\n".join(out.values()) if len(out) > 1 else next(iter(out.values())))
        return 0
    d = Path(args.output)
    try:
        d.mkdir(parents=True, exist_ok=True)
        for name, text in out.items():
            (d / name).write_text(text, encoding="utf-8")
            print(d / name, file=sys.stderr)
    except OSError as exc:
        print(f"kvdoctor rules export: cannot write {d}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0
