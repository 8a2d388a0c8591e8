#!/usr/bin/env bash
# Record the margins and ramps fixtures (vllm-0.32-cpu-margins/): light open-loop loads, open-loop ramps in steps
# from light through busy-but-healthy to just past capacity (with a --max-num-seqs the top steps nearly reach),
# the idle drain after each ramp, and the drain after a KV-bound phase; on two model shapes. ~55 min.
# Run it ALONE on the machine (a busy host inflates latencies and corrupts the labels).
# usage: tools/record/record_margins.sh VENV TINY_DIR LLAMA_DIR RAW_DIR
#   TINY_DIR:  make_model.py defaults (4 layers, hidden 512, 8 heads, 2 KV heads: head_dim 64)
#   LLAMA_DIR: make_model.py --hidden 1024 --layers 8 --heads 8 --kv-heads 2 --inter 2816 (head_dim 128, Llama-shaped GQA)
#   env: ONLY="name name" records only those runs; DTYPE (default float32) the server's --dtype
# Session 11's two Llama-shaped ramps (cap 8 and cap 32, at the end) were recorded on an Intel Xeon with AMX by
#   DTYPE=bfloat16 ONLY="llama_ramp_c8_bf16 llama_ramp_c32_bf16" tools/record/record_margins.sh ...
set -uo pipefail
V=$1 TINY=$2 LLAMA=$3 O=$4
: "${DTYPE:=float32}"
# shellcheck source=ramps_common.sh
. "$(dirname "$0")/ramps_common.sh"

S="prompt_min=100,prompt_max=300,out_min=64,out_max=192"
# tiny, cap 32: light 0.15 and 0.4 req/s (75 s each), then a ramp 1 -> 16 req/s (40 s a step, at most 44 in
# flight: past capacity 32 run and ~12 wait), then 100 s of idle scrapes (the drain).
# shellcheck disable=SC2046
run tiny_ramp_c32 "$TINY" VLLM_CPU_KVCACHE_SPACE=1 "--max-model-len 2048 --max-num-seqs 32" --pre 10 --post 100 \
  --phase rate=0.15,concurrency=44,duration=75,drain=10,$S,seed=101 \
  --phase rate=0.4,concurrency=44,duration=75,drain=10,$S,seed=102 \
  $(steps 110 40 44 "$S" 1 2 4 6 8 10 12 16)
# tiny, cap 32, finer steps around where it breaks on this CPU (~3 req/s in fp32 on an AMD EPYC without AVX-512).
# shellcheck disable=SC2046
run tiny_ramp_c32_fine "$TINY" VLLM_CPU_KVCACHE_SPACE=1 "--max-model-len 2048 --max-num-seqs 32" --pre 10 --post 30 \
  --phase rate=0.5,concurrency=44,duration=60,drain=10,$S,seed=121 \
  $(steps 121 40 44 "$S" 1.5 2 2.5 3 3.5 4 5)
# tiny, cap 8: a second configuration, batch-capped at the top (at most 20 in flight).
# shellcheck disable=SC2046
run tiny_ramp_c8 "$TINY" VLLM_CPU_KVCACHE_SPACE=1 "--max-model-len 2048 --max-num-seqs 8" --pre 10 --post 30 \
  $(steps 130 40 20 "$S" 1 2 3 4 5 6 8)
# llama-shaped (head_dim 128, 16 KiB/token in fp32; ~70 ms a token single-stream in fp32 here): shorter outputs,
# light 0.1 and 0.3 req/s (90 s each), then a ramp 0.2 -> 1.4 req/s in 60 s steps.
Sl="prompt_min=100,prompt_max=300,out_min=32,out_max=96"
# shellcheck disable=SC2046
run llama_ramp_c32 "$LLAMA" VLLM_CPU_KVCACHE_SPACE=1 "--max-model-len 2048 --max-num-seqs 32" --pre 10 --post 100 \
  --phase rate=0.1,concurrency=44,duration=90,drain=10,$Sl,seed=201 \
  --phase rate=0.3,concurrency=44,duration=90,drain=10,$Sl,seed=202 \
  $(steps 210 60 44 "$Sl" 0.2 0.35 0.5 0.7 0.9 1.1 1.4)
K="prompt_min=200,prompt_max=500,out_min=300,out_max=500"
# KV-bound phase then the drain: 24 workers for 50 s on a 32-block cache, the rest cancelled 3 s after, 100 s idle.
run tiny_kv_drain "$TINY" "" "--max-model-len 1024 --kv-cache-memory-bytes 16777216" --pre 10 --post 100 \
  --phase concurrency=2,duration=30,drain=3,prompt_min=50,prompt_max=100,out_min=32,out_max=64,seed=301 \
  --phase concurrency=24,duration=50,drain=3,$K,seed=302
run llama_kv_drain "$LLAMA" "" "--max-model-len 1024 --kv-cache-memory-bytes 67108864" --pre 10 --post 100 \
  --phase concurrency=2,duration=30,drain=3,prompt_min=50,prompt_max=100,out_min=32,out_max=64,seed=311 \
  --phase concurrency=24,duration=60,drain=3,prompt_min=300,prompt_max=600,out_min=150,out_max=250,seed=312
# Llama-shaped in bf16 on a CPU with AMX (~22 ms a token at 1-3 running, like tiny in fp32 on the EPYC): the cap-8
# ramp from plan's second check's light run (vllm-0.32-cpu-plancheck2: 1.0 req/s) past where that cap breaks, and a
# cap-32 ramp from a light 0.5 req/s past where one replica of cap 32 breaks (~4 req/s by plan's reading).
# shellcheck disable=SC2046
run llama_ramp_c8_bf16 "$LLAMA" VLLM_CPU_KVCACHE_SPACE=1 "--max-model-len 2048 --max-num-seqs 8" --pre 10 --post 30 \
  $(steps 140 40 20 "$S" 1 1.3 1.6 2 2.5 3)
# shellcheck disable=SC2046
run llama_ramp_c32_bf16 "$LLAMA" VLLM_CPU_KVCACHE_SPACE=1 "--max-model-len 2048 --max-num-seqs 32" --pre 10 --post 30 \
  --phase rate=0.5,concurrency=44,duration=60,drain=10,$S,seed=150 \
  $(steps 150 40 44 "$S" 1.5 2.5 3 3.5 4 4.5 5.5)
echo "$(date -u +%T) all done"
