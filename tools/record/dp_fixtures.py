"""Turn the data-parallel what-if pair (record_dp_pair.sh, session 15) into vllm-0.32-cpu-dp/.

usage: tools/record/dp_fixtures.py RAW_DIR OUT_DIR      (OUT_DIR: tests/fixtures/recordings/vllm-0.32-cpu-dp)
The same files and notes as whatif2_fixtures.py (one scrape every 2 s kept). The pair was recorded after the uneven
shares it checks were built (on the field dp2 recording), so it carries `set_aside`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from whatif2_fixtures import cli

F = "--dtype bfloat16 --data-parallel-size 2 --max-model-len 2048"
# (pair, change as knobs, before flags, after flags, load, seconds between kept scrapes)
PAIRS = [
    (
        "dp2_cap",
        {"max_num_seqs": 8},
        f"VLLM_CPU_OMP_THREADS_BIND='0|1' {F} --max-num-seqs 4",
        f"VLLM_CPU_OMP_THREADS_BIND='0|1' {F} --max-num-seqs 8",
        "tiny model, two engines (engine 0 on core 0, engine 1 on core 1, beside the API servers and the load); "
        "light: 6 workers 30 s without a rank header, vLLM's own DP balancing (seed 931); heavy: closed loop 22 "
        "workers 60 s, 20 sending X-data-parallel-rank 0 and 2 rank 1 (seed 932), prompt 100-300, out 64-256; the "
        "cap per engine raised 4 -> 8 with the router's pinning unchanged",
        2,
    ),
]  # fmt: skip  (a data table, as the recording script lists it)
LATER = {"dp2_cap": "recorded in session 15, after the uneven shares were built on the field dp2 recording"}
SESSION = {"dp2_cap": "session 15, Intel Xeon with AVX-512 BF16 and AMX, bf16, DP engines on cores 0 and 1"}


def main() -> int:
    return cli(__doc__, PAIRS, LATER, SESSION)


if __name__ == "__main__":
    sys.exit(main())
