#!/usr/bin/env bash
# Does the mix of a window (open-loop arrivals, long prompts sharing steps with decoders) change what a step costs,
# or only the batch? One cap-8 server, five phases one after the other: the plan check's light run (1 req/s, prompts
# 100-300 words, 64-192 output tokens), closed loops of 4 with short and with long prompts and long answers (almost no
# prefill), 1 req/s with short prompts, and the light run again. Read it with tools/step_curve.py. Run it ALONE.
# usage: tools/record/record_step_mix.sh VENV MODEL_DIR RAW_DIR   (bfloat16: a CPU with AVX-512 BF16 or AMX)
set -uo pipefail
V=$1 MODEL=$2 O=$3 R=$(cd "$(dirname "$0")" && pwd) port=${PORT:-8000}
mkdir -p "$O"
export VLLM_CPU_OMP_THREADS_BIND=0
env VLLM_CPU_KVCACHE_SPACE=1 "$R/serve.sh" "$V" "$MODEL" "$port" --max-model-len 2048 --max-num-seqs 8 --dtype bfloat16 >"$O/llama_bf16_mix.server.log" 2>&1 &
server=$!
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 1; done
echo "$(date -u +%T) mix: recording"
"$V/bin/python" "$R/load.py" llama_bf16_mix --out "$O" --base "http://127.0.0.1:$port" --warmup --pre 5 --post 5 \
  --phase "rate=1.0,concurrency=20,duration=60,drain=15,prompt_min=100,prompt_max=300,out_min=64,out_max=192,seed=101" \
  --phase "concurrency=4,duration=40,drain=15,prompt_min=32,prompt_max=48,out_min=240,out_max=256,seed=102" \
  --phase "concurrency=4,duration=40,drain=15,prompt_min=200,prompt_max=300,out_min=240,out_max=256,seed=103" \
  --phase "rate=1.0,concurrency=20,duration=60,drain=15,prompt_min=32,prompt_max=48,out_min=64,out_max=192,seed=104" \
  --phase "rate=1.0,concurrency=20,duration=60,drain=15,prompt_min=100,prompt_max=300,out_min=64,out_max=192,seed=105" \
  >"$O/llama_bf16_mix.load.log" 2>&1
kill -INT "$server"; wait "$server" || true
echo "$(date -u +%T) mix: done"
