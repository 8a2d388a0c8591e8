#!/usr/bin/env bash
# Record what vLLM's running gauge shows under long prompts and short answers (session 19): a request's first step
# (its prefill) is long beside its decode, so a gauge that counted it in that step would read several times what
# one that does not reads. vLLM publishes len(running) in make_stats, after a step's update, so a scrape never sees a
# request as running in the step that admits it; tests/whatif/test_gauges_recorded.py holds the simulation to it.
# Llama-shaped model, one server, ~4 min. Run it ALONE on the machine.
# usage: tools/record/record_gauges.sh VENV LLAMA_DIR RAW_DIR
#   env: DTYPE (bfloat16 on a CPU with AVX-512 BF16/AMX, else float32), PORT (8000)
set -euo pipefail
V=$1 LLAMA=$2 O=$3
here=$(cd "$(dirname "$0")" && pwd)
port=${PORT:-8000}
name=long_prompts_short_answers
mkdir -p "$O"
env VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0 "$here/serve.sh" "$V" "$LLAMA" "$port" \
  --dtype "${DTYPE:-bfloat16}" --max-model-len 2048 >"$O/$name.server.log" 2>&1 &
server=$!
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 1; done
# light: 2 closed-loop workers of ordinary requests (history for the step fit); then Poisson arrivals of
# 1,200-1,600-word prompts asking for 2-6 tokens
"$V/bin/python" "$here/load.py" "$name" --out "$O" --base "http://127.0.0.1:$port" --warmup \
  --phase "concurrency=2,rate=0,duration=30,drain=10,prompt_min=100,prompt_max=300,out_min=32,out_max=96,seed=1901" \
  --phase "concurrency=64,rate=0.6,duration=120,drain=30,prompt_min=1200,prompt_max=1600,out_min=2,out_max=6,seed=1902" \
  >"$O/$name.load.log" 2>&1
kill -INT "$server"; wait "$server" || true
