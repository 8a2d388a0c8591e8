"""What each relief buys on every labelled limited window, at the recording's own scrapes and at 15 s.

    python tools/relief_windows.py OUT.jsonl [--cadence 0 15] [--only SUBSTRING] [--shard I/N] [--through]
    python tools/relief_windows.py OUT.jsonl --show     # per relief: tokens/s and ITL factors, the ceiling share

Replays each window with the real advisor asked as `tests/test_relief_recordings.py` asks it, and writes one JSON
line per (window, cadence): the rule's verdict, the verdict with the relief check on, the borderline evidence and,
per relief simulated, the effect's now/after/interval and how the load met the server. Rules can then be compared
on these lines without simulating again (each window costs three or four simulations).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout, not the editable install's

from kvdoctor.pipeline import Pipeline  # noqa: E402
from kvdoctor.replay import replay  # noqa: E402
from kvdoctor.rules.loader import default_rule_files, load_files  # noqa: E402
from kvdoctor.verdicts import LIMITS, Diagnosis, Effect  # noqa: E402
from kvdoctor.whatif import gains, relief  # noqa: E402
from kvdoctor.whatif.advisor import Advisor  # noqa: E402
from tests.conftest import labelled_windows  # noqa: E402

EVIDENCE = (
    "itl_p50_s",
    "itl_batch_baseline_s",
    "itl_compute_threshold_s",
    "kv_usage_max_1m",
    "waiting_avg_1m",
)


class _AtTheEnd(Advisor):
    def __init__(self, at: float) -> None:
        super().__init__()
        self.at = at

    def annotate(self, diagnoses: list[Diagnosis], t: float) -> list[Diagnosis]:
        return super().annotate(diagnoses, t) if t >= self.at else diagnoses


def _effect(e: Effect) -> dict:
    return {
        "change": e.change,
        "now": e.now,
        "after": e.after,
        "p10": e.after_p10,
        "p90": e.after_p90,
        "closed_loop": e.closed_loop,
        "overloaded_now": e.overloaded_now,
        "then": e.bottleneck_after,
        "summary": e.summary(),
    }


def one(w: dict, cadence: float, through: bool = False) -> dict:
    """The window's last evaluation with the relief check on, and every relief's effect the check saw."""
    seen: dict = {}
    real_check = relief.check

    def spy(d, effects):
        seen["rule"] = d.verdict
        seen["evidence"] = {k: d.evidence.get(k) for k in EVIDENCE}
        seen["effects"] = {k: _effect(e) for k, (_, e) in effects.items()}
        return real_check(d, effects)

    relief.check = spy
    try:
        at = w["steady_to"] - 4.5
        asked = w["steady_from"] if through or "relief" in w else at
        pipeline = Pipeline(load_files(default_rule_files()), advisor=_AtTheEnd(min(at, asked)))
        final = None
        for c in replay(pipeline, [w["path"]], 5.0, cadence):
            if c.t >= at:
                if c.t <= w["steady_to"] + 0.5:
                    final = next((d for d in c.diagnoses if d.model_name), None)
                break
    finally:
        relief.check = real_check
    check = next((f for f in final.findings if f.name == "relief_check"), None) if final else None
    return {
        "id": f"{w['dir']}/{w['file']}@{w['steady_from']:.0f}",
        "cadence": cadence,
        "through": through,
        "expected": w["expected"],
        "relief": w.get("relief"),
        "verdict": final.verdict if final else None,
        "check": check.summary if check else None,
        "simulated": bool(seen.get("effects")),
        **seen,
    }


def show(path: str) -> None:
    """Each window's verdicts and, per relief, g_X, g_ITL and the ceiling share the rule weighs (whatif/gains.py)."""
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        print(
            f"{r['id']} @{r['cadence']:.0f}s: rule {r.get('rule')}, verdict {r['verdict']}, label {r['expected']}"
        )
        q = "ttft_p95_s" if (r.get("evidence", {}).get("waiting_avg_1m") or 0) >= 1 else "itl_p50_s"
        for k, e in (r.get("effects") or {}).items():
            eff = Effect(
                e["change"],
                e["now"],
                e["after"],
                e["then"],
                closed_loop=e["closed_loop"],
                overloaded_now=e["overloaded_now"],
            )
            g = gains.gain(eff, q)
            print(
                f"  {k:9s} tokens/s x{g.throughput:.3f} ITL x{g.slower:.2f} u {gains.ceiling_share(g):.2f} "
                f"saturated {eff.saturated} helps {gains.helps(eff, q)}"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cadence", type=float, nargs="+", default=[0.0, 15.0])
    ap.add_argument("--only", default="")
    ap.add_argument("--shard", default="0/1")
    ap.add_argument("--through", action="store_true", help="ask from the window's start (as the daemon does)")
    ap.add_argument("--show", action="store_true", help="print what OUT.jsonl holds instead of replaying")
    ap.add_argument("--min-scrapes", type=int, default=5, help="skip windows shorter than this many scrapes")
    args = ap.parse_args()
    if args.show:
        show(args.out)
        return
    i, n = (int(x) for x in args.shard.split("/"))
    todo = [
        (w, c)
        for w in labelled_windows()
        if w["expected"] in LIMITS and args.only in f"{w['dir']}/{w['file']}"
        for c in args.cadence
        if not c or w["steady_to"] - w["steady_from"] >= args.min_scrapes * c
    ]
    with open(args.out, "a") as f:
        for k, (w, c) in enumerate(todo):
            if k % n == i:
                f.write(json.dumps(one(w, c, args.through)) + "\n")
                f.flush()


if __name__ == "__main__":
    main()
