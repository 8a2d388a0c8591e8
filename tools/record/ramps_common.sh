# Sourced by record_margins.sh and record_ramps_fresh.sh (after they set V, the venv, and O, the raw folder): one
# server a run, the engine pinned to core 0, ONLY= filtering, and the open-loop steps of a ramp.
# DTYPE is the servers' --dtype (each script sets its own default before sourcing this).
R=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
port=${PORT:-8000}
mkdir -p "$O"
export VLLM_CPU_OMP_THREADS_BIND=0   # engine worker on core 0; API server and load generator on the other

run() {  # run NAME MODEL "SERVER_ENV" "SERVER FLAGS" load.py options...
  local name=$1 model=$2 senv=$3 flags=$4; shift 4
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  read -r -a f <<<"$flags --dtype $DTYPE"
  env $senv "$R/serve.sh" "$V" "$model" "$port" "${f[@]}" >"$O/$name.server.log" 2>&1 &
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
