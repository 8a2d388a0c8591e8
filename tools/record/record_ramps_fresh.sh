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
R=$(cd "$(dirname "$0")" && pwd)
port=${PORT:-8000}
mkdir -p "$O"
export VLLM_CPU_OMP_THREADS_BIND=0   # engine worker on core 0; API server and load generator on the other

run() {  # run NAME MODEL "SERVER FLAGS" load.py options...
  local name=$1 model=$2 flags=$3; shift 3
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  read -r -a f <<<"$flags --dtype ${DTYPE:-bfloat16}"
  env VLLM_CPU_KVCACHE_SPACE=1 "$R/serve.sh" "$V" "$model" "$port" "${f[@]}" >"$O/$name.server.log" 2>&1 &
  local server=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 1; done
  echo "$(date -u +%T) $name: recording"
  "$V/bin/python" "$R/load.py" "$name" --out "$O" --base "http://127.0.0.1:$port" --warmup "$@" >"$O/$name.load.log" 2>&1
  kill -INT "$server"; wait "$server" || true
  echo "$(date -u +%T) $name: done"
}

steps() {  # steps SEED_BASE DURATION CAP PROMPT/OUT rate... -> --phase options, one open-loop step per rate
  local seed=$1 dur=$2 cap=$3 shape=$4; shift 4
  local i=0
  for r in "$@"; do
    i=$((i + 1))
    printf -- '--phase rate=%s,concurrency=%s,duration=%s,drain=2,%s,seed=%s ' "$r" "$cap" "$dur" "$shape" $((seed + i))
  done
}

S="prompt_min=100,prompt_max=300,out_min=64,out_max=192"
# the light step at 0.5 req/s for 60 s, then steps past where one replica of cap 16 broke in plan's third check
# (4.25 req/s queued; 2.2 req/s held): 44 in flight at most, as the cap-32 ramps
# shellcheck disable=SC2046
run llama_ramp_c16_bf16 "$LLAMA" "--max-model-len 2048 --max-num-seqs 16" --pre 10 --post 30 \
  --phase rate=0.5,concurrency=44,duration=60,drain=10,$S,seed=160 \
  $(steps 160 45 44 "$S" 1.2 1.8 2.4 3 3.6 4.2)
# shellcheck disable=SC2046
run mha_ramp_c16_bf16 "$MHA" "--max-model-len 2048 --max-num-seqs 16" --pre 10 --post 30 \
  --phase rate=0.5,concurrency=44,duration=60,drain=10,$S,seed=170 \
  $(steps 170 45 44 "$S" 1.2 1.8 2.4 3 3.6 4.2)
echo "$(date -u +%T) all done"
