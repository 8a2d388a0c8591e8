#!/usr/bin/env bash
# Record the fourth set of what-if pairs (vllm-0.32-cpu-whatif3/, session 10): the load changes issue 21's list still
# lacked, each the same seeded load before and after (record_pair.sh), a fresh server each side. ~20 min.
# Run it ALONE on the machine.
# usage: tools/record/record_pairs4.sh VENV TINY_DIR LLAMA_DIR RAW_DIR     (models as in record_margins.sh)
#   env: ONLY="name name" records only those pairs
set -uo pipefail
V=$1 TINY=$2 LLAMA=$3 O=$4
# shellcheck source=pairs_common.sh
. "$(dirname "$0")/pairs_common.sh"

# open-loop arrival rate halved (load x0.5) on a busy, healthy tiny server: the load of load_x1.5_healthy, new seeds;
# session 10 ran it with TINY_RATE=2 TINY_RATE_AFTER=1 (4 req/s reached capacity on that AMD EPYC: 25-31 running).
C="prompt_min=100,prompt_max=300,out_min=32,out_max=128"
# shellcheck disable=SC2046
want tiny_loadhalf && SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 AFTER_ARGS="--rate ${TINY_RATE_AFTER:-1}" pair "$V" "$TINY" \
  "$O" tiny_loadhalf "--max-model-len 2048 $F" "--max-model-len 2048 $F" --rate "${TINY_RATE:-2}" \
  $(light 601) --phase concurrency=40,duration=60,drain=5,$C,seed=602
# closed loop doubled (5 -> 10 workers) against --max-num-seqs 8: the after side crosses into the cap, a queue builds.
C="prompt_min=100,prompt_max=300,out_min=64,out_max=256"
# shellcheck disable=SC2046
want tiny_closedx2 && SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 AFTER_ARGS="--concurrency 10" pair "$V" "$TINY" "$O" \
  tiny_closedx2 "--max-model-len 2048 --max-num-seqs 8 $F" "--max-model-len 2048 --max-num-seqs 8 $F" --concurrency 5 \
  $(light 611) --phase duration=60,drain=3,$C,seed=612
# open-loop arrival rate halved (0.5 -> 0.25 req/s) on the Llama-shaped model at cap 32 (llama_loadx2's before load).
C="prompt_min=100,prompt_max=300,out_min=32,out_max=96"
# shellcheck disable=SC2046
want llama_loadhalf && SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 AFTER_ARGS="--rate ${LLAMA_RATE_AFTER:-0.25}" pair "$V" \
  "$LLAMA" "$O" llama_loadhalf "--max-model-len 2048 --max-num-seqs 32 $F" "--max-model-len 2048 --max-num-seqs 32 $F" \
  --rate "${LLAMA_RATE:-0.5}" $(light 621) --phase concurrency=44,duration=90,drain=3,$C,seed=622
echo "$(date -u +%T) all done"
