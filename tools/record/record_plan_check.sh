#!/usr/bin/env bash
# Record the check of `kvdoctor plan`'s pick (issue 24: "the chosen configuration holds every SLO when recorded, and
# the next cheaper candidate breaks at least one"), on the tiny model with the cap-8 ramp's load shape
# (vllm-0.32-cpu-ramps/tiny_ramp_c8). plan, run on that ramp's light step (1.0 req/s, cap 8) for ×3 its traffic
# with the ramp's SLOs (TTFT p95 ≤ 0.74 s, ITL p50 ≤ 36 ms, queue time p95 ≤ 1 s), picks 2 replicas at
# --max-num-seqs 16; the cheapest candidates, one replica, all break (the closest: --max-num-seqs 64).
# Six servers, one after the other (~21 min; run it ALONE on the machine):
#   plancheck_light_c8    the ramp's light step again (cap 8, 1.0 req/s, at most 20 in flight, the ramp's seed):
#                         today's machine against the fixture's, since the SLOs and plan's fit come from that step
#   plancheck_chosen_c16  the pick: one of its two replicas, --max-num-seqs 16 at 1.5 req/s (an even split of a
#                         Poisson 3.0 req/s is Poisson 1.5 at each replica)
#   plancheck_cheaper_c64 the next cheaper: one replica, --max-num-seqs 64, at 3.0 req/s
#   plancheck_flags_c8    the same price without the flag change: one of two replicas of today's cap 8 at 1.5 req/s
#   plancheck_one_c16, plancheck_one_c32  the other one-replica caps at 3.0 req/s (the same arrivals as c64), so
#                         whichever one-replica configuration a later plan picks has its recording
# usage: tools/record/record_plan_check.sh VENV TINY_DIR RAW_DIR      (TINY_DIR as in record_margins.sh)
set -uo pipefail
V=$1 TINY=$2 O=$3
R=$(cd "$(dirname "$0")" && pwd)
port=${PORT:-8000}
mkdir -p "$O"
export VLLM_CPU_OMP_THREADS_BIND=0   # engine worker on core 0; API server and load generator beside it
S="prompt_min=100,prompt_max=300,out_min=64,out_max=192"   # the cap-8 ramp's shape

run() {  # run NAME CAP load.py options...
  local name=$1 cap=$2; shift 2
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  env VLLM_CPU_KVCACHE_SPACE=1 "$R/serve.sh" "$V" "$TINY" "$port" --max-model-len 2048 --max-num-seqs "$cap" \
    --dtype float32 >"$O/$name.server.log" 2>&1 &
  local server=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 1; done
  echo "$(date -u +%T) $name: recording"
  "$V/bin/python" "$R/load.py" "$name" --out "$O" --base "http://127.0.0.1:$port" --warmup --pre 10 --post 10 "$@" \
    >"$O/$name.load.log" 2>&1
  kill -INT "$server"; wait "$server" || true
  echo "$(date -u +%T) $name: done"
}

run plancheck_light_c8 8 --phase rate=1.0,concurrency=20,duration=60,drain=10,$S,seed=131
run plancheck_chosen_c16 16 --phase rate=1.5,concurrency=200,duration=150,drain=30,$S,seed=141
run plancheck_cheaper_c64 64 --phase rate=3.0,concurrency=200,duration=150,drain=30,$S,seed=142
run plancheck_flags_c8 8 --phase rate=1.5,concurrency=200,duration=150,drain=30,$S,seed=141
run plancheck_one_c32 32 --phase rate=3.0,concurrency=200,duration=150,drain=30,$S,seed=142
run plancheck_one_c16 16 --phase rate=3.0,concurrency=200,duration=150,drain=30,$S,seed=142
