#!/usr/bin/env bash
# Record the co-binding fixture (vllm-0.32-cpu-cobinding/, issue 22 item 3): the Llama-shaped model at cap 32, a light
# open-loop phase, then an open-loop rate just past its capacity held for 240 s with in-flight requests unbounded
# (at most 200), so running sits at the cap while the queue and TTFT keep growing; then a 60 s drain (unfinished
# requests cancelled after it) and 100 s of idle scrapes. ~10 min. Run it ALONE on the machine.
# usage: [CAP=32] [NAME=…] tools/record/record_cobinding.sh VENV LLAMA_DIR RAW_DIR   (LLAMA_DIR as in record_margins.sh)
# The pair llama_cobind in vllm-0.32-cpu-whatif2/ is CAP=32 then CAP=64 back to back (NAME=llama_cobindpair_cCAP).
# Capacity on this CPU (vllm-0.32-cpu-ramps/llama_ramp_c32): ~45-50 generated tok/s whatever the batch past ~13
# running, i.e. ~0.75 req/s at 64 output tokens a request; 1.0 req/s offers 64 tok/s, ~30 % past it.
set -uo pipefail
V=$1 LLAMA=$2 O=$3
R=$(cd "$(dirname "$0")" && pwd)
port=${PORT:-8000}
mkdir -p "$O"
export VLLM_CPU_OMP_THREADS_BIND=0   # engine worker on core 0; API server and load generator beside it
name=${NAME:-llama_cobind_c${CAP:-32}}
Sl="prompt_min=100,prompt_max=300,out_min=32,out_max=96"   # the llama ramp's shape
env VLLM_CPU_KVCACHE_SPACE=1 "$R/serve.sh" "$V" "$LLAMA" "$port" --max-model-len 2048 --max-num-seqs "${CAP:-32}" \
  --dtype float32 >"$O/$name.server.log" 2>&1 &
server=$!
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 1; done
echo "$(date -u +%T) $name: recording"
"$V/bin/python" "$R/load.py" "$name" --out "$O" --base "http://127.0.0.1:$port" --warmup --pre 10 --post 100 \
  --phase rate=0.2,concurrency=200,duration=60,drain=10,$Sl,seed=501 \
  --phase rate=1.0,concurrency=200,duration=240,drain=60,$Sl,seed=502 >"$O/$name.load.log" 2>&1
kill -INT "$server"; wait "$server" || true
echo "$(date -u +%T) $name: done"
