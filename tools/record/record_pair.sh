#!/usr/bin/env bash
# Record a what-if pair: the same load (same seed) against a server before and after one flag change, one server at
# a time, each recording its own OUT/NAME_before.jsonl and OUT/NAME_after.jsonl (plus .client.json, .server.log).
# usage: tools/record/record_pair.sh VENV MODEL_DIR OUT_DIR NAME "BEFORE_FLAGS" "AFTER_FLAGS" [load.py options...]
#   env: PORT (8000), SERVER_ENV (extra env for both servers, e.g. VLLM_CPU_KVCACHE_SPACE=1),
#        AFTER_ARGS (load.py options appended for the after run only: a load change such as "--rate 6", which phases
#        that do not set rate themselves inherit; then BEFORE_FLAGS and AFTER_FLAGS may be equal)
#   e.g. ... kv2x "--kv-cache-memory-bytes 16777216" "--kv-cache-memory-bytes 33554432" \
#        --phase concurrency=2,duration=25 --phase concurrency=24,duration=60,drain=5
set -euo pipefail
venv=$1 model=$2 out=$3 name=$4 before=$5 after=$6; shift 6
here=$(cd "$(dirname "$0")" && pwd)
port=${PORT:-8000}
mkdir -p "$out"
for side in before after; do
  extra=()
  if [ $side = before ]; then read -r -a flags <<<"$before"; else read -r -a flags <<<"$after"; fi
  if [ $side = after ] && [ -n "${AFTER_ARGS:-}" ]; then read -r -a extra <<<"$AFTER_ARGS"; fi
  env ${SERVER_ENV:-} "$here/serve.sh" "$venv" "$model" "$port" "${flags[@]}" >"$out/${name}_$side.server.log" 2>&1 &
  server=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 1; done
  "$venv/bin/python" "$here/load.py" "${name}_$side" --out "$out" --base "http://127.0.0.1:$port" "$@" "${extra[@]}" \
    >"$out/${name}_$side.load.log" 2>&1
  kill -INT "$server"; wait "$server" || true
done
