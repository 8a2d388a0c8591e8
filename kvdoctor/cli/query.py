"""`kvdoctor query RECORDING EXPR… --time T [--json]`: evaluate PromQL against a recording as if scraped live."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvdoctor.ingest.recording import RecordingError, load_frames
from kvdoctor.promql.check import ExprError, check_expr
from kvdoctor.promql.values import EvalError
from kvdoctor.query import instant_query, load_store, recording_instance


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("query", help="evaluate PromQL expressions against a recording")
    p.add_argument("recording", help="recording file: JSON lines {t, text}, optionally gzip")
    p.add_argument("exprs", nargs="+", metavar="EXPR", help="PromQL expressions")
    p.add_argument(
        "--time", "-t", dest="time", help="unix seconds, or +S/-S relative to the recording's start/end"
    )
    p.add_argument("--json", action="store_true", help="print Prometheus API `data` objects")
    p.add_argument("--instance", help="instance label for the recording's series (default: file name)")
    p.add_argument("--job", default="vllm", help="job label (default vllm)")
    p.set_defaults(run=run)


def _resolve_time(spec: str | None, first: float, last: float) -> float:
    if spec is None:
        return last
    if spec.startswith("+"):
        return first + float(spec[1:])
    if spec.startswith("-"):
        return last - float(spec[1:])
    return float(spec)


def run(args: argparse.Namespace) -> int:
    """Evaluate and print; exit 2 on a bad recording or expression."""
    for expr in args.exprs:
        try:
            check_expr(expr)
        except ExprError as exc:
            print(f"kvdoctor query: {exc}", file=sys.stderr)
            return 2
    try:
        frames = load_frames(args.recording)
        if not frames:
            print(f"kvdoctor query: {args.recording}: no frames", file=sys.stderr)
            return 2
        t = _resolve_time(args.time, frames[0].t, frames[-1].t)
        instance = args.instance or recording_instance(args.recording)
        store = load_store([(args.recording, instance, 0.0)], job=args.job)
    except (RecordingError, OSError) as exc:
        print(f"kvdoctor query: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"kvdoctor query: --time: {exc}", file=sys.stderr)
        return 2
    results = []
    for expr in args.exprs:
        try:
            results.append(instant_query(store, expr, t))
        except EvalError as exc:
            print(f"kvdoctor query: {expr}: {exc}", file=sys.stderr)
            return 2
        except RecursionError:  # within the load-time bounds, but deeper than this interpreter's stack
            print(f"kvdoctor query: {expr[:80]}: expression too deeply nested to evaluate", file=sys.stderr)
            return 2
    if args.json:
        out: Any = results[0] if len(results) == 1 else results
        print(json.dumps(out, indent=None if len(results) == 1 else 1))
        return 0
    for expr, data in zip(args.exprs, results, strict=True):
        print(format_table(expr, data))
    return 0


def format_table(expr: str, data: dict[str, Any]) -> str:
    """A readable table of one result."""
    lines = [f"# {expr}  ({data['resultType']})"]
    kind = data["resultType"]
    if kind in ("scalar", "string"):
        lines.append(f"  {data['result'][1]}")
        return "\n".join(lines)
    rows = []
    for item in data["result"]:
        metric = item["metric"]
        name = metric.get("__name__", "")
        labels = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
        series = f"{name}{{{labels}}}"
        if kind == "vector":
            rows.append((series, item["value"][1]))
        else:
            rows.append((series, " ".join(v for _, v in item["values"][-5:])))
    if not rows:
        lines.append("  (no data)")
    width = max((len(r[0]) for r in rows), default=0)
    lines += [f"  {s.ljust(width)}  {v}" for s, v in sorted(rows)]
    return "\n".join(lines)
