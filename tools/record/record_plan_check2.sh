#!/usr/bin/env bash
# A second check of `kvdoctor plan`'s pick (issue 24: "the chosen configuration holds every SLO when recorded, and
# the next cheaper candidate breaks at least one"), made in one sitting on one machine, so the light run that plan
# reads and the runs of what it names share the machine's day. Same tiny model and load shape as
# record_plan_check.sh (the cap-8 ramp's: prompts 100-300 words, 64-192 output tokens, open loop).
# Each argument is one run, NAME:CAP:RATE:SEED; a run whose NAME contains "light" is the light run (60 s, at most
# 20 in flight), the others 150 s with up to 200 in flight. The lead runs the light run first, runs plan on it, then
# records the configurations plan names at the rate one of their replicas gets (an even split of a Poisson stream
# is Poisson at each replica): several arguments for one call, one server after the other. Run it ALONE on the machine.
# usage: tools/record/record_plan_check2.sh VENV TINY_DIR RAW_DIR NAME:CAP:RATE:SEED...
# env: DTYPE (default bfloat16: for a CPU with AVX-512 BF16 or AMX; float32 elsewhere), PORT
set -uo pipefail
V=$1 TINY=$2 O=$3; shift 3
R=$(cd "$(dirname "$0")" && pwd)
port=${PORT:-8000}
mkdir -p "$O"
export VLLM_CPU_OMP_THREADS_BIND=0   # engine worker on core 0; API server and load generator beside it
S="prompt_min=100,prompt_max=300,out_min=64,out_max=192"   # the cap-8 ramp's shape

for spec in "$@"; do
  IFS=: read -r name cap rate seed <<<"$spec"
  if [[ $name == *light* ]]; then load="concurrency=20,duration=60,drain=10"; else load="concurrency=200,duration=150,drain=30"; fi
  env VLLM_CPU_KVCACHE_SPACE=1 "$R/serve.sh" "$V" "$TINY" "$port" --max-model-len 2048 --max-num-seqs "$cap" \
    --dtype "${DTYPE:-bfloat16}" >"$O/$name.server.log" 2>&1 &
  server=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 1; done
  echo "$(date -u +%T) $name: recording (cap $cap, $rate req/s, seed $seed)"
  "$V/bin/python" "$R/load.py" "$name" --out "$O" --base "http://127.0.0.1:$port" --warmup --pre 10 --post 10 \
    --phase "rate=$rate,$load,$S,seed=$seed" >"$O/$name.load.log" 2>&1
  kill -INT "$server"; wait "$server" || true
  echo "$(date -u +%T) $name: done"
done
