#!/usr/bin/env bash
# How one decode step's duration grows with the batch on this CPU, with almost no prefill in the steps (issue 21
# item 1): one server, closed loops of N clients one after the other (N from the arguments), each request a short
# prompt (32-48 words) and a long answer (240-256 tokens, ignore_eos), so a step decodes N requests and a prefill
# joins one step in about 250/N. Read it with tools/step_curve.py. Run it ALONE on the machine.
# usage: tools/record/record_step_curve.sh VENV MODEL_DIR RAW_DIR NAME CAP N...
# env: DTYPE (default bfloat16: for a CPU with AVX-512 BF16 or AMX; float32 elsewhere), PORT, PHASE_S (default 25)
set -uo pipefail
V=$1 MODEL=$2 O=$3 NAME=$4 CAP=$5; shift 5
R=$(cd "$(dirname "$0")" && pwd)
port=${PORT:-8000}
mkdir -p "$O"
export VLLM_CPU_OMP_THREADS_BIND=0   # engine worker on core 0; API server and load generator beside it
env VLLM_CPU_KVCACHE_SPACE=1 "$R/serve.sh" "$V" "$MODEL" "$port" --max-model-len 2048 --max-num-seqs "$CAP" \
  --dtype "${DTYPE:-bfloat16}" >"$O/$NAME.server.log" 2>&1 &
server=$!
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 1; done
phases=()
for n in "$@"; do
  phases+=(--phase "concurrency=$n,duration=${PHASE_S:-25},drain=15,prompt_min=32,prompt_max=48,out_min=240,out_max=256,seed=$n")
done
echo "$(date -u +%T) $NAME: recording (cap $CAP, closed loops of $*)"
"$V/bin/python" "$R/load.py" "$NAME" --out "$O" --base "http://127.0.0.1:$port" --warmup --pre 5 --post 5 \
  "${phases[@]}" >"$O/$NAME.load.log" 2>&1
kill -INT "$server"; wait "$server" || true
echo "$(date -u +%T) $NAME: done"
