#!/usr/bin/env bash
# Record what-if pairs whose heavy window is an open loop rising across it (session 16): the same seeded load on a
# fresh server before and after raising --max-num-seqs 8 -> 16. They check that whatif follows an uneven window's
# arrival profile (whatif/profile.py) under a change it was not built on. ~8 min a pair. Run it ALONE on the machine.
# Session 17 added llama_rising_cap, on the Llama-shaped model (LLAMA_DIR), recorded after whatif learned to judge
# a profile window's class at its busiest part and to read the cap from a stretch of queue.
# usage: tools/record/record_rising_pair.sh VENV TINY_DIR RAW_DIR [LLAMA_DIR]
#   env: DTYPE (bfloat16 on a CPU with AVX-512 BF16/AMX, else float32), ONLY (one pair's name)
set -uo pipefail
V=$1 TINY=$2 O=$3 LLAMA=${4:-}
R=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$O"
F="--dtype ${DTYPE:-bfloat16} --max-model-len 2048"
C="prompt_min=100,prompt_max=300,out_min=64,out_max=192"
# light: 2 closed-loop workers; heavy: Poisson arrivals whose rate rises linearly over 120 s (at most 400 in flight):
# rising_cap from 0.5 to 6 req/s (8 seats serve it: the cap barely binds), rising_cap_steep from 1 to 12 req/s (past
# what 8 seats serve); llama_rising_cap from 0.5 to 3.5 req/s (8 seats serve ~2 req/s of this model, 16 ~3)
for spec in rising_cap:tiny:0.5:6:1601 rising_cap_steep:tiny:1:12:1611 llama_rising_cap:llama:0.5:3.5:1621; do
  IFS=: read -r name model from to seed <<<"$spec"
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ] && continue
  dir=$TINY
  if [ "$model" = llama ]; then
    [ -n "$LLAMA" ] || { echo "$name: give LLAMA_DIR" >&2; continue; }
    dir=$LLAMA
  fi
  echo "$(date -u +%T) $name: recording"
  SERVER_ENV="VLLM_CPU_KVCACHE_SPACE=1" "$R/record_pair.sh" "$V" "$dir" "$O" "$name" \
    "$F --max-num-seqs 8" "$F --max-num-seqs 16" \
    --phase "concurrency=2,rate=0,duration=30,drain=5,$C,seed=$seed" \
    --phase "concurrency=400,rate=$from,rate_to=$to,duration=120,drain=60,$C,seed=$((seed + 1))"
  echo "$(date -u +%T) $name: done"
done
