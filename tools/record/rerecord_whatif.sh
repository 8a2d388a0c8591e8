#!/usr/bin/env bash
# Record every what-if pair of tests/fixtures/recordings/vllm-0.32-cpu-whatif/ (flags, loads and seeds as in
# pairs.json), one server at a time, ~20 min; then tools/record/whatif_fixtures.py RAW OUT makes the fixtures.
# Run it ALONE on the machine: on a busy host short steps slow down more than long ones and a pair's two sides
# see different contention (the first mnbt pair, recorded beside other jobs, showed a -17 % tokens/s that a
# quiet re-recording does not).
# usage: tools/record/rerecord_whatif.sh VENV MODEL_DIR RAW_DIR
set -uo pipefail
V=$1 M=$2 O=$3
R=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$O"
export VLLM_CPU_OMP_THREADS_BIND=0
B="prompt_min=100,prompt_max=300,out_min=64,out_max=256"
SCENARIO=batchcap_restart SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 \
  PHASES="concurrency=2,duration=20,drain=3,$B,seed=11;concurrency=24,duration=45,drain=3,$B,seed=12" \
  AFTER_FLAGS="--max-model-len 2048 --max-num-seqs 12 --dtype float32" \
  "$R/record_restart.sh" "$V" "$M" "$O" --max-model-len 2048 --max-num-seqs 4 --dtype float32
K="prompt_min=200,prompt_max=500,out_min=300,out_max=500"
"$R/record_pair.sh" "$V" "$M" "$O" kv2x \
  "--max-model-len 1024 --kv-cache-memory-bytes 16777216 --dtype float32" \
  "--max-model-len 1024 --kv-cache-memory-bytes 33554432 --dtype float32" \
  --phase concurrency=2,duration=30,drain=3,prompt_min=50,prompt_max=100,out_min=32,out_max=64,seed=21 \
  --phase concurrency=24,duration=60,drain=3,$K,seed=22
SCENARIO=kv2x_restart PHASES="concurrency=24,duration=45,drain=3,$K,seed=22" \
  AFTER_FLAGS="--max-model-len 1024 --kv-cache-memory-bytes 33554432 --dtype float32" \
  "$R/record_restart.sh" "$V" "$M" "$O" --max-model-len 1024 --kv-cache-memory-bytes 16777216 --dtype float32
L="prompt_min=100,prompt_max=300,out_min=32,out_max=128"
SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 AFTER_ARGS="--rate 6" "$R/record_pair.sh" "$V" "$M" "$O" loadx15 \
  "--max-model-len 2048 --dtype float32" "--max-model-len 2048 --dtype float32" --rate 4 \
  --phase concurrency=2,rate=0,duration=30,drain=3,$L,seed=31 --phase concurrency=40,duration=60,drain=10,$L,seed=32
Lp="prompt_min=1000,prompt_max=2000,out_min=16,out_max=64"
SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 "$R/record_pair.sh" "$V" "$M" "$O" mnbt \
  "--max-model-len 4096 --max-num-batched-tokens 2048 --dtype float32" \
  "--max-model-len 4096 --max-num-batched-tokens 512 --dtype float32" \
  --phase concurrency=1,duration=30,drain=3,$Lp,seed=41 --phase concurrency=8,duration=60,drain=5,$Lp,seed=42
C="prompt_min=100,prompt_max=300,out_min=64,out_max=256"
SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 AFTER_ARGS="--concurrency 24" "$R/record_pair.sh" "$V" "$M" "$O" loadcap \
  "--max-model-len 2048 --max-num-seqs 4 --dtype float32" "--max-model-len 2048 --max-num-seqs 4 --dtype float32" \
  --concurrency 16 --phase concurrency=2,duration=30,drain=3,$C,seed=51 --phase duration=60,drain=3,$C,seed=52
