#!/usr/bin/env bash
# Record what-if pairs whose heavy window is an open loop rising across it (session 16): the same seeded load on a
# fresh server before and after raising --max-num-seqs 8 -> 16. They check that whatif follows an uneven window's
# arrival profile (whatif/profile.py) under a change it was not built on. ~8 min a pair. Run it ALONE on the machine.
# usage: tools/record/record_rising_pair.sh VENV TINY_DIR RAW_DIR
#   env: DTYPE (bfloat16 on a CPU with AVX-512 BF16/AMX, else float32), ONLY (one pair's name)
set -uo pipefail
V=$1 TINY=$2 O=$3
R=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$O"
F="--dtype ${DTYPE:-bfloat16} --max-model-len 2048"
C="prompt_min=100,prompt_max=300,out_min=64,out_max=192"
# light: 2 closed-loop workers; heavy: Poisson arrivals whose rate rises linearly over 120 s (at most 400 in flight):
# rising_cap from 0.5 to 6 req/s (8 seats serve it: the cap barely binds), rising_cap_steep from 1 to 12 req/s (past
# what 8 seats serve)
for spec in rising_cap:0.5:6:1601 rising_cap_steep:1:12:1611; do
  IFS=: read -r name from to seed <<<"$spec"
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ] && continue
  echo "$(date -u +%T) $name: recording"
  SERVER_ENV="VLLM_CPU_KVCACHE_SPACE=1" "$R/record_pair.sh" "$V" "$TINY" "$O" "$name" \
    "$F --max-num-seqs 8" "$F --max-num-seqs 16" \
    --phase "concurrency=2,rate=0,duration=30,drain=5,$C,seed=$seed" \
    --phase "concurrency=400,rate=$from,rate_to=$to,duration=120,drain=60,$C,seed=$((seed + 1))"
  echo "$(date -u +%T) $name: done"
done
