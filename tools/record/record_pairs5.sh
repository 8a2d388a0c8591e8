#!/usr/bin/env bash
# Record the fifth set of what-if pairs (vllm-0.32-cpu-whatif4/, session 21): fresh held-out pairs on the
# Llama-shaped model in bf16, recorded before anything was tuned on them, so bench_whatif.py's set-aside part has
# pairs no session has looked at (session 20's closing note: the older set-aside part is worn). ~20 min.
# Run it ALONE on the machine.
# usage: tools/record/record_pairs5.sh VENV MODEL_DIR RAW_DIR     (the Llama-shaped model of record_margins.sh)
#   env: ONLY="name name" records only those pairs; DTYPE (bfloat16 by default: a CPU with AVX-512 BF16 or AMX);
#        SHAPE (llama by default: the pairs' name prefix; session 21 also ran SHAPE=mha with the multi-head model of
#        record_ramps_fresh.sh, ONLY="mha_bf16_cap8to16 mha_bf16_loadx1.5")
set -uo pipefail
V=$1 LLAMA=$2 O=$3
P=${SHAPE:-llama}_bf16
# shellcheck source=pairs_common.sh
. "$(dirname "$0")/pairs_common.sh"
F="--dtype ${DTYPE:-bfloat16}"

# KV cache halved (48 -> 24 MiB: 6,144 -> 3,072 tokens of 8 KiB in bf16) under a closed loop of 12 with long outputs:
# the before side runs near 80 % usage, the after side preempts.
L="prompt_min=100,prompt_max=300,out_min=128,out_max=384"
# shellcheck disable=SC2046
want ${P}_kvhalf && pair "$V" "$LLAMA" "$O" ${P}_kvhalf \
  "--max-model-len 2048 --kv-cache-memory-bytes 50331648 $F" "--max-model-len 2048 --kv-cache-memory-bytes 25165824 $F" \
  $(light 701) --phase concurrency=12,duration=90,drain=3,$L,seed=702
# --max-num-seqs raised 8 -> 16 under an open loop that queues at 8 (plancheck3_flags_c8 queued at 2 req/s).
C="prompt_min=100,prompt_max=300,out_min=64,out_max=192"
# shellcheck disable=SC2046
want ${P}_cap8to16 && SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 pair "$V" "$LLAMA" "$O" ${P}_cap8to16 \
  "--max-model-len 2048 --max-num-seqs 8 $F" "--max-model-len 2048 --max-num-seqs 16 $F" --rate 1.8 \
  $(light 711) --phase concurrency=200,duration=120,drain=5,$C,seed=712
# open-loop rate x1.5 (1.4 -> 2.1 req/s) at cap 32: a healthy server made busier, still below capacity.
# shellcheck disable=SC2046
want ${P}_loadx1.5 && SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 AFTER_ARGS="--rate 2.1" pair "$V" "$LLAMA" "$O" \
  ${P}_loadx1.5 "--max-model-len 2048 --max-num-seqs 32 $F" "--max-model-len 2048 --max-num-seqs 32 $F" \
  --rate 1.4 $(light 721) --phase concurrency=200,duration=120,drain=5,$C,seed=722
echo "$(date -u +%T) all done"
