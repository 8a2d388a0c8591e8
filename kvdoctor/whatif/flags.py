"""The flag combinations the planner tries, fewest changes first, each one vLLM would start with."""

from __future__ import annotations

import itertools

from kvdoctor.whatif.candidates import Changes
from kvdoctor.whatif.predict import Basis
from kvdoctor.whatif.slo import number

SEQ_FACTORS = (1, 2, 4, 8)
MNBT_FACTORS = (1, 2, 0.5)
GPU_UTILIZATION = 0.95  # what `--gpu` lets the search raise gpu_memory_utilization to


def combinations(basis: Basis, gpu_memory_bytes: float | None) -> list[Changes]:
    """Flag combinations to try, fewest changes first; those vLLM would refuse to start are left out.

    gpu_memory_bytes (from `--gpu`) lets gpu_memory_utilization rise; a server that speculates may stop.
    """
    e = basis.engine
    seqs = [int(e.max_num_seqs * f) for f in SEQ_FACTORS]
    mnbt = [int(e.max_num_batched_tokens * f) for f in MNBT_FACTORS]
    dtype = ["auto"] if (basis.info.get("cache_dtype") or "auto").startswith("fp8") else ["auto", "fp8"]
    util: list[float | None] = [None]
    now_util = number(basis.info.get("gpu_memory_utilization"))
    sized = number(basis.info.get("kv_cache_memory_bytes")) is not None  # what the knob scales from
    if gpu_memory_bytes and sized and now_util is not None and now_util < GPU_UTILIZATION:
        util.append(GPU_UTILIZATION)
    # speculation helps ITL at light load and may cost throughput at peak: off is a candidate where it runs
    spec: list[int | None] = [None, 0] if e.num_speculative_tokens else [None]
    out = []
    for s, t, d, u, k in itertools.product(seqs, mnbt, dtype, util, spec):
        if s > t:
            continue
        c: Changes = {}
        if s != e.max_num_seqs:
            c["max_num_seqs"] = s
        if t != e.max_num_batched_tokens:
            c["max_num_batched_tokens"] = t
        if d != "auto":
            c["kv_cache_dtype"] = d
        if u is not None:
            c["gpu_memory_utilization"] = u
        if k is not None:
            c["num_speculative_tokens"] = k
        out.append(c)
    return sorted(out, key=len)
