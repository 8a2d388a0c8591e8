#!/usr/bin/env bash
# Record a server restart: load, SIGINT the server, start it again while the scraper keeps running (failed scrapes
# become {"t", "error"} lines), load again once /health answers.
# usage: tools/record/record_restart.sh VENV MODEL_DIR OUT_DIR [serve flags...]
#   env: PORT (8000); SCENARIO (restart: OUT/SCENARIO.jsonl ...); SERVER_ENV (extra env for the server);
#   LIGHT   one load.py phase spec, run before the stop and again after the restart (the default load);
#   PHASES  ';'-separated phase specs instead of LIGHT: the whole list runs before the stop and again after
#           (same seeds, so the same requests), e.g. a light then a heavy phase;
#   AFTER_FLAGS  serve flags for the second start (default: the same flags): a restart with a changed flag;
#   STOP_AT S    SIGINT S seconds after the first phase began, while the load keeps going (no repeat: the phases
#           run once and their workers retry through the downtime) — a restart under load. vLLM's HTTP server
#           waits for open streams to close after SIGINT (it stops generating, /metrics refuses connections, the
#           streams hang until their clients give up; a second SIGINT or a SIGTERM did not end it), so GRACE seconds
#           (10) after the SIGINT a SIGKILL ends the API server, as an orchestrator's after its grace period would.
set -euo pipefail
venv=$1 model=$2 out=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
port=${PORT:-8000} scen=${SCENARIO:-restart}
light=${LIGHT:-rate=2,concurrency=8,duration=45,prompt_min=100,prompt_max=300,out_min=32,out_max=128}
IFS=';' read -r -a phases <<<"${PHASES:-$light}"
read -r -a after <<<"${AFTER_FLAGS:-$*}"
mkdir -p "$out"
start_server() {
  env ${SERVER_ENV:-} "$here/serve.sh" "$venv" "$model" "$port" "$@" >>"$out/$scen.server.log" 2>&1 &
  server=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 1; done
}
args=()
for p in "${phases[@]}"; do args+=(--phase "$p"); done
n=${#phases[@]}
if [ -z "${STOP_AT:-}" ]; then
  args+=(--phase "${phases[0]},pause=20,wait_health=1")
  for p in "${phases[@]:1}"; do args+=(--phase "$p"); done
fi
start_server "$@"
"$venv/bin/python" "$here/load.py" "$scen" --out "$out" --base "http://127.0.0.1:$port" --pre 10 --post 10 \
  "${args[@]}" >"$out/$scen.load.log" 2>&1 &
load=$!
if [ -n "${STOP_AT:-}" ]; then
  until grep -q "^phase 0 start" "$out/$scen.load.log"; do sleep 0.2; done
  sleep "$STOP_AT"
else
  until grep -q "^phase $((n - 1)) end" "$out/$scen.load.log"; do sleep 1; done
  sleep 5                                 # a few idle scrapes before the stop
fi
date +%s.%N >"$out/$scen.sigint_at"
kill -INT "$server"
for _ in $(seq "${GRACE:-10}"); do kill -0 "$server" 2>/dev/null || break; sleep 1; done
if kill -0 "$server" 2>/dev/null; then date +%s.%N >"$out/$scen.sigkill_at"; kill -KILL "$server"; fi
wait "$server" || true
date +%s.%N >"$out/$scen.exited_at"
start_server "${after[@]}"
date +%s.%N >"$out/$scen.up_at"           # /health answers again
wait "$load"
kill -INT "$server"; wait "$server" || true
