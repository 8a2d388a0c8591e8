"""Run what an SRE would run on every recording we have, and flag what a user should never see.

    python tools/sweep_recordings.py [--full] [--only SUBSTRING] [--commands replay,report,whatif,plan]
                                     [--no-reuse] [--out RESULTS.jsonl] [--timeout CPU_S]

Recordings: /work/shared/recordings/**, tests/fixtures/recordings/** and kvdoctor/demo/* (*.jsonl.gz). Per
recording: `replay`, `report` (md and json), `whatif` with each kind of knob (max_num_seqs up and down,
max_num_batched_tokens, kv_cache_dtype, gpu_memory_utilization with --gpu, load x1.5 and x0.5, prefix caching,
speculation where the recording has it, replicas) and `plan` with SLOs at twice the recording's own measured
TTFT p95 and ITL p50, each with and without --json. It runs kvdoctor's CLI in this one process (no internet, no
parallelism) and prints one line per (recording, command): ok / error (exit 2 and its message) / TRACEBACK, CPU
and wall seconds, and flags: NaN, inf or negative values in JSON, absurd predictions (tokens/s above what the load
offers, headroom < 0), a window whose own (unchanged) prediction misses what it measured by a wide factor and
outside its interval, a whatif over 2 s of CPU per 5 minutes of window, a plan over 10 s, and a verdict that
differs between --json and text. A summary table of counts per command ends the run.

By default the --json run of a whatif or plan reuses the prediction of its text run (same argv, same seed), so
both renderings are checked for the price of one simulation; --no-reuse computes both. Without --full, whatif
runs the knobs on a rotating subset of recordings (every knob still on several) and plan on every third one,
so the sweep takes minutes; --full runs every knob on every recording (about an hour on two cores).
Recordings of `set_aside` pairs are swept for failures only: their prediction errors are not looked at.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout, not the editable install's
sys.path.insert(0, str(ROOT / "tools"))

import sweep_checks as checks  # noqa: E402

import kvdoctor.cli.plan as cli_plan  # noqa: E402
import kvdoctor.cli.whatif as cli_whatif  # noqa: E402
import kvdoctor.whatif.learn as learn_cache  # noqa: E402
from kvdoctor.cli import main  # noqa: E402

SHARED = Path("/work/shared/recordings")
COMMANDS = ("replay", "report", "whatif", "plan")


def recordings() -> list[Path]:
    """Every recording we have, shared ones first."""
    found = sorted(SHARED.glob("**/*.jsonl.gz")) if SHARED.is_dir() else []
    found += sorted((ROOT / "tests/fixtures/recordings").glob("**/*.jsonl.gz"))
    return found + sorted((ROOT / "kvdoctor/demo").glob("*.jsonl.gz"))


def set_aside() -> set[Path]:
    """The recordings of pairs that carry `set_aside`."""
    out: set[Path] = set()
    for pairs in (ROOT / "tests/fixtures/recordings").glob("*/pairs.json"):
        data = json.loads(pairs.read_text())
        for p in data if isinstance(data, list) else data.get("pairs", []):
            if isinstance(p, dict) and p.get("set_aside"):
                out |= {pairs.parent / str(p.get(k)) for k in ("before", "after") if p.get(k)}
    return out


class Timeout(Exception):
    """The command ran past --timeout."""


class Memo:
    """Reuses a text run's prediction for the same argv with --json (the CLI's own functions, wrapped)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.key, self.store = enabled, (), {}
        for module, name in ((cli_whatif, "predict"), (cli_plan, "learn"), (cli_plan, "plan")):
            setattr(module, name, self._wrap(name, getattr(module, name)))

    def _wrap(self, name: str, fn: Any) -> Any:
        def wrapped(*a: Any, **kw: Any) -> Any:
            key = (name, *self.key)
            if self.enabled and key in self.store:
                return self.store[key]
            value = fn(*a, **kw)
            self.store[key] = value
            return value

        return wrapped


def run_cli(argv: list[str], memo: Memo, timeout: float) -> dict[str, Any]:
    """One kvdoctor invocation in this process: exit code, output, traceback, CPU and wall seconds."""
    memo.key = tuple(a for a in argv if a != "--json")
    out, err = io.StringIO(), io.StringIO()
    tb, code = "", -1

    def alarm(*_: Any) -> None:
        raise Timeout(f"over {timeout:g} s of CPU")

    # CPU seconds, not wall: a lead may SIGSTOP the sweep for minutes while a vLLM recording runs
    old = signal.signal(signal.SIGPROF, alarm)
    signal.setitimer(signal.ITIMER_PROF, timeout)
    cpu, wall = time.process_time(), time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    except Timeout as exc:
        tb = f"timeout: {exc}"
    except Exception:  # a traceback is what the sweep looks for
        tb = traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)
    return {
        "argv": argv,
        "code": code,
        "stdout": out.getvalue(),
        "stderr": err.getvalue(),
        "traceback": tb,
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.monotonic() - wall,
    }


def plans(rec: Path, base: dict[str, Any], full: bool) -> list[tuple[str, list[str]]]:
    """`plan` with SLOs at 2x what the recording measured (and, with --full, at 0.5x with load x1.5)."""
    m = base.get("measured") or {}
    ttft, itl = m.get("ttft_p95_s") or 1.0, m.get("itl_p50_s") or 0.025
    out = [
        (
            "plan slo x2",
            ["plan", str(rec), "--slo", f"ttft_p95={2 * ttft:.4g}s", "--slo", f"itl_p50={2 * itl:.4g}s"],
        )
    ]
    if full:
        tight = ["--slo", f"ttft_p95={ttft / 2:.4g}s", "--slo", f"itl_p50={itl / 2:.4g}s", "--load", "x1.5"]
        out.append(("plan slo /2 load x1.5", ["plan", str(rec), *tight]))
    return out


def whatifs(rec: Path, base: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """One `whatif` per kind of knob, sized from the recording's own engine settings."""
    now = (base.get("engine") or {}).get("now") or {}
    seqs, mnbt = int(now.get("max_num_seqs") or 256), int(now.get("max_num_batched_tokens") or 2048)
    caching = "false" if now.get("enable_prefix_caching") else "true"
    knobs = [
        ("max_num_seqs up", [f"max_num_seqs={2 * seqs}"]),
        ("max_num_seqs down", [f"max_num_seqs={max(1, seqs // 2)}"]),
        ("max_num_batched_tokens", [f"max_num_batched_tokens={2 * mnbt}"]),
        ("kv_cache_dtype", ["kv_cache_dtype=fp8"]),
        ("gpu_memory_utilization", ["gpu_memory_utilization=0.95"]),
        ("load x1.5", ["load=x1.5"]),
        ("load x0.5", ["load=x0.5"]),
        ("prefix caching", [f"enable_prefix_caching={caching}"]),
        ("replicas", ["replicas=2"]),
    ]
    if now.get("num_speculative_tokens"):
        knobs.append(("speculation", [f"num_speculative_tokens={int(now['num_speculative_tokens']) + 1}"]))
    out = []
    for name, sets in knobs:
        argv = ["whatif", str(rec), *[x for s in sets for x in ("--set", s)]]
        out.append((f"whatif {name}", argv + (["--gpu", "H100"] if name == "gpu_memory_utilization" else [])))
    return out


def sweep_one(rec: Path, i: int, args: argparse.Namespace, memo: Memo, aside: bool) -> list[dict[str, Any]]:
    """Every command on one recording, text then --json, each checked."""
    done: list[dict[str, Any]] = []

    def both(kind: str, label: str, argv: list[str], json_flag: list[str]) -> dict[str, Any] | None:
        learn_cache._cache.clear()  # the text run pays what a user's one invocation pays; --json may reuse it
        text = run_cli(argv, memo, args.timeout)
        if not memo.enabled:
            learn_cache._cache.clear()
        js = run_cli(argv + json_flag, memo, args.timeout)
        data = checks.load_json(js) if js["code"] in (0, 1) and not js["traceback"] else None
        for form, r in (("text", text), ("json", js)):
            r.update(rec=str(rec), kind=kind, label=f"{label} [{form}]", form=form, aside=aside)
            r["flags"] = checks.flags(kind, r, data, text, args.timeout)
            done.append(r)
            print(checks.line(r), flush=True)
        return data

    if "replay" in args.commands:
        both("replay", "replay", ["replay", str(rec)], ["--json"])
    if "report" in args.commands:
        both("report", "report", ["report", str(rec), "--gpu-hour-cost", "2.49"], ["--format", "json"])
    base: dict[str, Any] = {}
    if "whatif" in args.commands or "plan" in args.commands:
        memo.key = ()
        learn_cache._cache.clear()
        probe = run_cli(["whatif", str(rec), "--set", "load=x1", "--json"], memo, args.timeout)
        base = checks.load_json(probe) or {} if probe["code"] == 0 else {}
        if base and not aside:  # the window's own prediction against what it measured, once a recording
            probe.update(rec=str(rec), kind="whatif", label="whatif window [json]", form="probe", aside=aside)
            probe["flags"] = checks.unchanged_misses(base)
            done.append(probe)
            print(checks.line(probe), flush=True)
    if "whatif" in args.commands:
        runs = whatifs(rec, base)
        if not args.full:  # a rotating third of the knobs, so each kind lands on a third of the recordings
            runs = [r for j, r in enumerate(runs) if (j + i) % 3 == 0]
        for label, argv in runs:
            both("whatif", label, argv, ["--json"])
    if "plan" in args.commands and (args.full or i % 3 == 0):
        for label, argv in plans(rec, base, args.full):
            both("plan", label, argv, ["--json"])
    return done


def summary(results: list[dict[str, Any]]) -> str:
    """Counts per command: ok, error (exit 2 with a message), traceback, flagged."""
    table: dict[str, Counter[str]] = {}
    for r in results:
        c = table.setdefault(r["kind"], Counter())
        c["runs"] += 1
        c[checks.status(r)] += 1
        c["flagged"] += bool(r["flags"])
    cols = ("runs", "ok", "error", "traceback", "flagged")
    lines = ["command  " + "  ".join(f"{c:>9s}" for c in cols)]
    for kind, c in table.items():
        lines.append(f"{kind:8s} " + "  ".join(f"{c[k]:9d}" for k in cols))
    return "\n".join(lines)


def main_(argv: list[str] | None = None) -> int:
    """Sweep; exit 1 when anything was a traceback or flagged."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="every knob and plan on every recording")
    ap.add_argument("--only", action="append", default=[], help="recordings whose path holds this")
    ap.add_argument(
        "--commands", default=",".join(COMMANDS), help="comma-separated subset of " + ",".join(COMMANDS)
    )
    ap.add_argument("--no-reuse", action="store_true", help="simulate the --json runs again")
    ap.add_argument("--timeout", type=float, default=120.0, help="CPU seconds per command")
    ap.add_argument("--out", help="write every result (argv, exit, output, flags) as JSON lines here")
    args = ap.parse_args(argv)
    args.commands = set(args.commands.split(","))
    memo, aside = Memo(not args.no_reuse), set_aside()
    recs = [r for r in recordings() if not args.only or any(s in str(r) for s in args.only)]
    results: list[dict[str, Any]] = []
    for i, rec in enumerate(recs):
        print(f"# {rec}{'  (set aside: failures only)' if rec in aside else ''}", flush=True)
        results += sweep_one(rec, i, args, memo, rec in aside)
        memo.store.clear()
    if args.out:
        with open(args.out, "w") as fh:
            for r in results:
                fh.write(json.dumps(r) + "\n")
    print("\n" + summary(results))
    return 1 if any(r["traceback"] or r["flags"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main_())
