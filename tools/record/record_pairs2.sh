#!/usr/bin/env bash
# Record the second set of what-if pairs (vllm-0.32-cpu-whatif2/): the same seeded load before and after one change,
# a fresh server each side (record_pair.sh), on the Llama-shaped model (head_dim 128) and the tiny one. ~30 min.
# Run it ALONE on the machine.
# usage: tools/record/record_pairs2.sh VENV TINY_DIR LLAMA_DIR RAW_DIR     (models as in record_margins.sh)
#   env: ONLY="name name" records only those pairs
set -uo pipefail
V=$1 TINY=$2 LLAMA=$3 O=$4
# shellcheck source=pairs_common.sh
. "$(dirname "$0")/pairs_common.sh"

# In order of need (the first three were recorded in session 5; the rest when the machine is quiet again).
# The Llama-shaped model runs ~70 ms a token single-stream here: shorter outputs, longer heavy phases.
C="prompt_min=100,prompt_max=300,out_min=32,out_max=96"
# open-loop arrival rate doubled (0.5 -> 1.0 req/s) on a server with cap 32: the after side crosses into saturation.
# shellcheck disable=SC2046
want llama_loadx2 && SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 AFTER_ARGS="--rate 1.0" pair "$V" "$LLAMA" "$O" llama_loadx2 \
  "--max-model-len 2048 --max-num-seqs 32 $F" "--max-model-len 2048 --max-num-seqs 32 $F" --rate 0.5 \
  $(light 431) --phase concurrency=44,duration=90,drain=3,$C,seed=432
# batch cap raised 8 -> 24 under 24 closed-loop workers.
# shellcheck disable=SC2046
want llama_cap && SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 pair "$V" "$LLAMA" "$O" llama_cap \
  "--max-model-len 2048 --max-num-seqs 8 $F" "--max-model-len 2048 --max-num-seqs 24 $F" \
  $(light 411) --phase concurrency=24,duration=90,drain=3,$C,seed=412
# prefix caching on -> off under a shared 768-word system prompt.
want tiny_prefix && SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 pair "$V" "$TINY" "$O" tiny_prefix \
  "--max-model-len 2048 --enable-prefix-caching $F" "--max-model-len 2048 --no-enable-prefix-caching $F" \
  --shared-prefix 768 \
  --phase concurrency=1,duration=30,drain=3,prompt_min=32,prompt_max=96,out_min=32,out_max=64,seed=441 \
  --phase concurrency=8,duration=60,drain=3,prompt_min=32,prompt_max=96,out_min=32,out_max=64,seed=442
# KV cache halved (64 -> 32 blocks of 128) under a closed loop of long outputs (tiny: 4 KiB/token in fp32).
L="prompt_min=100,prompt_max=200,out_min=400,out_max=600"
# shellcheck disable=SC2046
want tiny_kvhalf && pair "$V" "$TINY" "$O" tiny_kvhalf \
  "--max-model-len 1024 --kv-cache-memory-bytes 33554432 $F" "--max-model-len 1024 --kv-cache-memory-bytes 16777216 $F" \
  $(light 401) --phase concurrency=16,duration=60,drain=3,$L,seed=402
# max_num_batched_tokens raised 256 -> 1024 under long prompts (RAG-like).
P="prompt_min=500,prompt_max=1000,out_min=16,out_max=48"
want llama_mnbt && SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 pair "$V" "$LLAMA" "$O" llama_mnbt \
  "--max-model-len 2048 --max-num-batched-tokens 256 $F" "--max-model-len 2048 --max-num-batched-tokens 1024 $F" \
  --phase concurrency=1,duration=30,drain=3,$P,seed=421 --phase concurrency=6,duration=90,drain=5,$P,seed=422
C="prompt_min=100,prompt_max=300,out_min=64,out_max=256"
# batch cap lowered 16 -> 6 under 24 closed-loop workers.
# shellcheck disable=SC2046
want tiny_caplow && SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 pair "$V" "$TINY" "$O" tiny_caplow \
  "--max-model-len 2048 --max-num-seqs 16 $F" "--max-model-len 2048 --max-num-seqs 6 $F" \
  $(light 451) --phase concurrency=24,duration=60,drain=3,$C,seed=452
echo "$(date -u +%T) all done"
