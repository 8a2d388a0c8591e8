#!/usr/bin/env bash
# Record a data-parallel what-if pair (session 15): --data-parallel-size 2 with a router pinning most requests to
# engine 0 (X-data-parallel-rank), before and after one change, the same seeded load on a fresh server each side.
# It checks that whatif simulates each engine with its own share under a change it was not built on. ~8 min.
# Run it ALONE on the machine (two engines on two cores).
# usage: tools/record/record_dp_pair.sh VENV TINY_DIR RAW_DIR
#   env: DTYPE (bfloat16 on a CPU with AVX-512 BF16/AMX, else float32)
set -uo pipefail
V=$1 TINY=$2 O=$3
R=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$O"
F="--dtype ${DTYPE:-bfloat16} --data-parallel-size 2 --max-model-len 2048"
C="prompt_min=100,prompt_max=300,out_min=64,out_max=256"
# balanced first (no header: vLLM's own DP balancing), then 20 of 22 clients pinned to engine 0 and 2 to engine 1;
# the cap is raised 4 -> 8 per engine: engine 0 still queues, now at 8
echo "$(date -u +%T) dp2_cap: recording"
SERVER_ENV="VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0|1" "$R/record_pair.sh" "$V" "$TINY" "$O" dp2_cap \
  "$F --max-num-seqs 4" "$F --max-num-seqs 8" \
  --phase "concurrency=6,rate=0,duration=30,drain=3,$C,seed=931" \
  --phase "concurrency=22,duration=60,drain=3,$C,dp_ranks=0/0/0/0/0/0/0/0/0/0/1,seed=932"
echo "$(date -u +%T) dp2_cap: done"
