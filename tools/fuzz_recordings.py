"""Mutate a real recording the way a broken or hostile exporter would, and run every offline command on each copy.

    python tools/fuzz_recordings.py RECORDING [--runs N] [--seed S] [--timeout SECONDS] [--out DIR]

Each run picks one mutation and applies it across the recording's pages: impossible sample values (NaN, ±Inf,
negative, 1e300), bucket bounds that are no number, buckets whose counts fall, counters that run back, a family
dropped, pages cut short, series repeated with other values, hundreds of engines, info labels that are no number,
a family scaled a trillion times, hostile model names, every histogram's answers poisoned past max_model_len, and
an ITL _count that lies. Then `whatif`, `plan`, `report` (text and html), `replay` (text and json), `capacity` and
`query` run on it, each in its own process. A user must get an answer or a one-line error: the tool prints every
run that ended in a traceback, an exit code outside 0-3, or no answer within the timeout, and exits 1 if any did.

It found the faults session 18 fixed (tests/whatif/test_hostile_sim.py and the tests beside each fix hold them).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VALUE = re.compile(r"^(vllm:[^ ]+) (\S+)$", re.M)
COUNTERS = ("_total", "_count", "_sum", "_bucket")
BAD_VALUES = ("NaN", "+Inf", "-Inf", "-1", "1e300", "1e14", "0")
BAD_INFO = ("0", "-1", "1e30", "abc", "", "NaN", "inf", "99999999999999999999")
NAMES = ("<b>x</b>", "@channel", "a" * 5000, "", "m\\\\n", "<https://evil|x>")
Mutation = Callable[[str, random.Random, dict[str, str]], str]


def _values(text: str, rng: random.Random, _: dict[str, str]) -> str:
    return VALUE.sub(
        lambda m: f"{m.group(1)} {rng.choice(BAD_VALUES)}" if rng.random() < 0.05 else m.group(0), text
    )


def _le(text: str, rng: random.Random, _: dict[str, str]) -> str:
    return re.sub(
        r'le="([^"]+)"', lambda m: f'le="{rng.choice(["abc", "NaN", "-1", m.group(1), "1e400"])}"', text
    )


def _falling_buckets(text: str, rng: random.Random, _: dict[str, str]) -> str:
    return re.sub(
        r"(_bucket\{[^}]*\}) (\S+)", lambda m: f"{m.group(1)} {float(m.group(2)) * rng.random():g}", text
    )


def _counters_back(text: str, rng: random.Random, _: dict[str, str]) -> str:
    if rng.random() >= 0.2:
        return text
    return VALUE.sub(
        lambda m: (
            f"{m.group(1)} {float(m.group(2)) * 0.5:g}"
            if any(c in m.group(1) for c in COUNTERS)
            else m.group(0)
        ),
        text,
    )


def _drop_family(text: str, rng: random.Random, state: dict[str, str]) -> str:
    if "family" not in state:
        names = sorted({m.group(1).split("{")[0] for m in VALUE.finditer(text)})
        state["family"] = re.sub(r"_(bucket|sum|count|total)$", "", rng.choice(names)) if names else "-"
    return "\n".join(line for line in text.split("\n") if state["family"] not in line) + "\n"


def _truncate(text: str, rng: random.Random, _: dict[str, str]) -> str:
    return text[: rng.randrange(len(text))] if text and rng.random() < 0.2 else text


def _repeated_series(text: str, rng: random.Random, _: dict[str, str]) -> str:
    lines = text.split("\n")
    extra = [
        VALUE.sub(lambda m: f"{m.group(1)} {rng.random() * 100:g}", line)
        for line in lines
        if line.startswith("vllm:") and rng.random() < 0.1
    ]
    return "\n".join(lines + extra) + "\n"


def _engines(text: str, rng: random.Random, state: dict[str, str]) -> str:
    n = int(state.setdefault("engines", str(rng.choice([2, 50, 300]))))
    lines = text.split("\n")
    more = [
        line.replace('engine="0"', f'engine="{e}"')
        for line in lines
        if line.startswith("vllm:") and 'engine="0"' in line
        for e in range(1, n)
    ]
    return "\n".join(lines + more) + "\n"


def _info(text: str, rng: random.Random, state: dict[str, str]) -> str:
    key = state.setdefault(
        "key", rng.choice(["block_size", "num_gpu_blocks", "kv_cache_size_tokens", "cache_dtype"])
    )
    junk = state.setdefault("junk", rng.choice(BAD_INFO))
    return re.sub(rf'({key}=")[^"]*(")', lambda m: m.group(1) + junk + m.group(2), text)


def _scaled(text: str, rng: random.Random, state: dict[str, str]) -> str:
    if "scaled" not in state:
        names = sorted({m.group(1).split("{")[0] for m in VALUE.finditer(text)})
        state["scaled"] = rng.choice(names) if names else "-"
    return VALUE.sub(
        lambda m: (
            f"{m.group(1)} {float(m.group(2)) * 1e12:g}"
            if m.group(1).startswith(state["scaled"])
            else m.group(0)
        ),
        text,
    )


def _names(text: str, rng: random.Random, _: dict[str, str]) -> str:
    return re.sub(r'model_name="[^"]*"', lambda m: 'model_name="' + rng.choice(NAMES) + '"', text)


def _long_answers(text: str, rng: random.Random, _: dict[str, str]) -> str:
    found = re.search(r"^vllm:request_generation_tokens_count\{[^}]*\} (\S+)$", text, re.M)
    total = f"{3000 * float(found.group(1)) if found else 0.0:g}"
    bucket = r'^(vllm:request_generation_tokens_bucket\{[^}]*le="([^"]+)"[^}]*\}) (\S+)$'
    text = re.sub(
        bucket, lambda m: m.group(0) if m.group(2) == "+Inf" else f"{m.group(1)} 0", text, flags=re.M
    )
    return re.sub(r"^(vllm:request_generation_tokens_sum\{[^}]*\}) (\S+)$", rf"\1 {total}", text, flags=re.M)


def _lying_itl(text: str, rng: random.Random, _: dict[str, str]) -> str:
    line = r"^(vllm:inter_token_latency_seconds_count\{[^}]*\}) (\S+)$"
    return re.sub(line, lambda m: f"{m.group(1)} {float(m.group(2)) * 1e28:g}", text, flags=re.M)


MUTATIONS: dict[str, Mutation] = {
    "values": _values,
    "le": _le,
    "falling_buckets": _falling_buckets,
    "counters_back": _counters_back,
    "drop_family": _drop_family,
    "truncate": _truncate,
    "repeated_series": _repeated_series,
    "engines": _engines,
    "info": _info,
    "scaled": _scaled,
    "names": _names,
    "long_answers": _long_answers,
    "lying_itl": _lying_itl,
}


def commands(path: Path) -> list[list[str]]:
    """What an operator would run on a recording."""
    p = str(path)
    ttft = "histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[1m])))"
    return [
        ["whatif", p, "--set", "max_num_seqs=16"],
        ["plan", p, "--slo", "ttft_p95=2s"],
        ["report", p],
        ["report", p, "--format", "html"],
        ["replay", p],
        ["replay", p, "--json"],
        ["capacity", "--recording", p],
        ["query", p, ttft, "kvdoctor:bottleneck:class"],
    ]


def mutate(frames: list[dict[str, object]], name: str, rng: random.Random) -> list[dict[str, object]]:
    """The frames with one mutation applied to every page."""
    state: dict[str, str] = {}
    out = []
    for frame in frames:
        copy = dict(frame)
        text = copy.get("text")
        if isinstance(text, str):
            copy["text"] = MUTATIONS[name](text, rng, state)
        out.append(copy)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recording", type=Path)
    ap.add_argument("--runs", type=int, default=len(MUTATIONS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=90.0, help="seconds a command may take (default 90)")
    ap.add_argument(
        "--out", type=Path, default=None, help="keep the mutated recordings here (default: a temp dir)"
    )
    args = ap.parse_args()
    with gzip.open(args.recording, "rt") as fh:
        frames = [json.loads(line) for line in fh]
    rng, failed = random.Random(args.seed), 0
    names = list(MUTATIONS)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        for i in range(args.runs):
            name = names[i] if i < len(names) else rng.choice(names)
            path = out / f"{args.recording.name.split('.')[0]}-{i}-{name}.jsonl.gz"
            with gzip.open(path, "wt") as fh:
                fh.writelines(json.dumps(f) + "\n" for f in mutate(frames, name, rng))
            for argv in commands(path):
                what = f"run {i} ({name}): kvdoctor {argv[0]}"
                try:
                    done = subprocess.run(
                        [sys.executable, "-m", "kvdoctor", *argv],
                        capture_output=True,
                        text=True,
                        timeout=args.timeout,
                        cwd=ROOT,
                    )
                except subprocess.TimeoutExpired:
                    failed += 1
                    print(f"{what}: no answer within {args.timeout:g} s", flush=True)
                    continue
                if "Traceback" in done.stderr or done.returncode not in (0, 1, 2, 3):
                    failed += 1
                    tail = "\n    ".join(done.stderr.strip().splitlines()[-4:])
                    print(f"{what}: exit {done.returncode}\n    {tail}", flush=True)
            print(f"run {i} ({name}) done", flush=True)
    print(f"{args.runs} runs, {failed} command(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
