"""Turn the rising-load what-if pairs (record_rising_pair.sh, session 16) into vllm-0.32-cpu-rising/.

usage: tools/record/rising_fixtures.py RAW_DIR OUT_DIR      (OUT_DIR: tests/fixtures/recordings/vllm-0.32-cpu-rising)
The same files and notes as whatif2_fixtures.py (one scrape every 2 s kept). Their heavy window is an open loop whose
rate rises across it; they were recorded after whatif learned to follow such a window's arrival profile (built on
the field `busy` recording), so each carries `set_aside`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from whatif2_fixtures import cli

F = "--dtype bfloat16 --max-model-len 2048"
# (pair, change as knobs, before flags, after flags, load, seconds between kept scrapes)
PAIRS = [
    (
        "rising_cap",
        {"max_num_seqs": 16},
        f"{F} --max-num-seqs 8",
        f"{F} --max-num-seqs 16",
        "tiny model; light: 2 workers closed loop 30 s (seed 1601); heavy: open loop, Poisson arrivals whose rate "
        "rises linearly from 0.5 to 6 req/s over 120 s, at most 400 in flight (seed 1602), prompt 100-300, out "
        "64-192; the cap raised 8 -> 16 (where it barely bound)",
        2,
    ),
    (
        "rising_cap_steep",
        {"max_num_seqs": 16},
        f"{F} --max-num-seqs 8",
        f"{F} --max-num-seqs 16",
        "tiny model; light: 2 workers closed loop 30 s (seed 1611); heavy: open loop, Poisson arrivals whose rate "
        "rises linearly from 1 to 12 req/s over 120 s, at most 400 in flight (seed 1612), prompt 100-300, out "
        "64-192; the cap raised 8 -> 16",
        2,
    ),
    (
        "llama_rising_cap",
        {"max_num_seqs": 16},
        f"{F} --max-num-seqs 8",
        f"{F} --max-num-seqs 16",
        "Llama-shaped model (8 layers, hidden 1024, 2 KV heads of 128); light: 2 workers closed loop 30 s (seed "
        "1621); heavy: open loop, Poisson arrivals whose rate rises linearly from 0.5 to 3.5 req/s over 120 s, at "
        "most 400 in flight (seed 1622), prompt 100-300, out 64-192; the cap raised 8 -> 16",
        2,
    ),
]  # fmt: skip  (a data table, as the recording script lists it)
LATER = {
    **dict.fromkeys(
        ("rising_cap", "rising_cap_steep"),
        "recorded in session 16, after the arrival profile was built on the field busy recording",
    ),
    "llama_rising_cap": "recorded in session 17, after the class of a profile window was judged at its busiest "
    "part and the cap read from a stretch of queue (both built on rising_cap_steep)",
}
SESSION = {
    **dict.fromkeys(
        ("rising_cap", "rising_cap_steep"), "session 16, Intel Xeon with AVX-512 BF16 and AMX, bf16"
    ),
    "llama_rising_cap": "session 17, Intel Xeon with AVX-512 BF16 and AMX, bf16",
}


def main() -> int:
    return cli(__doc__, PAIRS, LATER, SESSION)


if __name__ == "__main__":
    sys.exit(main())
