#!/usr/bin/env bash
# Fresh held-out ramps for issue 24's check (session 21, vllm-0.32-cpu-ramps3/): open-loop ramps in steps at a cap
# no ramp had (16), on the Llama-shaped model and on a new shape (multi-head attention, 8 KV heads: three times the
# KV a token), recorded before plan was run on them. Same load shape and step rules as record_margins.sh. ~20 min.
# Run it ALONE on the machine.
# usage: tools/record/record_ramps_fresh.sh VENV LLAMA_DIR MHA_DIR RAW_DIR
#   LLAMA_DIR: make_model.py --hidden 1024 --layers 8 --heads 8 --kv-heads 2 --inter 2816
#   MHA_DIR:   make_model.py --hidden 1024 --layers 6 --heads 8 --kv-heads 8 --inter 2816
#   env: ONLY="name name", DTYPE (bfloat16 by default: a CPU with AVX-512 BF16 or AMX), PORT
set -uo pipefail
V=$1 LLAMA=$2 MHA=$3 O=$4
: "${DTYPE:=bfloat16}"
# shellcheck source=ramps_common.sh
. "$(dirname "$0")/ramps_common.sh"

S="prompt_min=100,prompt_max=300,out_min=64,out_max=192"
# the light step at 0.5 req/s for 60 s, then steps past where one replica of cap 16 broke in plan's third check
# (4.25 req/s queued; 2.2 req/s held): 44 in flight at most, as the cap-32 ramps
# shellcheck disable=SC2046
run llama_ramp_c16_bf16 "$LLAMA" VLLM_CPU_KVCACHE_SPACE=1 "--max-model-len 2048 --max-num-seqs 16" --pre 10 --post 30 \
  --phase rate=0.5,concurrency=44,duration=60,drain=10,$S,seed=160 \
  $(steps 160 45 44 "$S" 1.2 1.8 2.4 3 3.6 4.2)
# shellcheck disable=SC2046
run mha_ramp_c16_bf16 "$MHA" VLLM_CPU_KVCACHE_SPACE=1 "--max-model-len 2048 --max-num-seqs 16" --pre 10 --post 30 \
  --phase rate=0.5,concurrency=44,duration=60,drain=10,$S,seed=170 \
  $(steps 170 45 44 "$S" 1.2 1.8 2.4 3 3.6 4.2)
echo "$(date -u +%T) all done"
