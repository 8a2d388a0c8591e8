"""Turn the fourth set of raw what-if pairs (record_pairs4.sh, session 10) into vllm-0.32-cpu-whatif3/.

usage: tools/record/whatif3_fixtures.py RAW_DIR OUT_DIR      (OUT_DIR: tests/fixtures/recordings/vllm-0.32-cpu-whatif3)
The same files and notes as whatif2_fixtures.py (one scrape every 2 s kept). Every pair here was recorded after the
simulator and the interval constants were tuned, so each carries `set_aside`: bench_whatif.py scores it with the
set-aside part, outside the every-third count.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from whatif2_fixtures import cli

F = "--dtype float32"
TINY_OPEN = "prompt 100-300, out 32-128"
# (pair, change as knobs, before flags, after flags, load, seconds between kept scrapes)
PAIRS = [
    (
        "tiny_loadhalf",
        {"load": 0.5},
        f"--max-model-len 2048 {F}",
        f"--max-model-len 2048 {F}",
        f"tiny model; light: 2 workers 30 s (seed 601); heavy: open loop Poisson 2 req/s before, 1 after (seed 602: the "
        f"same requests, inter-arrival times x2), at most 40 in flight, 60 s, {TINY_OPEN}: a busy, healthy server halved "
        "(4 req/s, load_x1.5_healthy's rate, reached capacity on this CPU: 25-31 running, ITL 80-220 ms)",
        2,
    ),
    (
        "tiny_closedx2",
        {"load": 2.0},
        f"--max-model-len 2048 --max-num-seqs 8 {F}",
        f"--max-model-len 2048 --max-num-seqs 8 {F}",
        "tiny model; light: 2 workers 30 s (seed 611); heavy: closed loop 5 workers before, 10 after, 60 s, prompt "
        "100-300, out 64-256 (seed 612): the after side crosses the cap of 8, a queue builds",
        2,
    ),
    (
        "llama_loadhalf",
        {"load": 0.5},
        f"--max-model-len 2048 --max-num-seqs 32 {F}",
        f"--max-model-len 2048 --max-num-seqs 32 {F}",
        "llama-shaped model; light: 2 workers 30 s (seed 621); heavy: open loop 0.5 req/s before, 0.25 after, at most "
        "44 in flight, 90 s, prompt 100-300, out 32-96 (seed 622)",
        2,
    ),
]  # fmt: skip  (a data table: one pair a row group, as the recording script lists them)
LATER = {
    name: "recorded in session 10, after every coefficient and interval constant was tuned"
    for name, *_ in PAIRS
}
SESSION = {name: "session 10, AMD EPYC without AVX-512, fp32, engine on core 0" for name, *_ in PAIRS}


def main() -> int:
    return cli(__doc__, PAIRS, LATER, SESSION)


if __name__ == "__main__":
    sys.exit(main())
