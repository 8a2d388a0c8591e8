#!/usr/bin/env bash
# Record a server restart: light load, SIGINT the server, start it again with the same flags while the scraper keeps
# running (failed scrapes become {"t", "error"} lines), light load again once /health answers.
# usage: tools/record/record_restart.sh VENV MODEL_DIR OUT_DIR [serve flags...]
#   env: PORT (8000), LIGHT (load.py phase spec for each light phase), SERVER_ENV (extra env for the server)
set -euo pipefail
venv=$1 model=$2 out=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
port=${PORT:-8000}
light=${LIGHT:-rate=2,concurrency=8,duration=45,prompt_min=100,prompt_max=300,out_min=32,out_max=128}
mkdir -p "$out"
start_server() {
  env ${SERVER_ENV:-} "$here/serve.sh" "$venv" "$model" "$port" "$@" >>"$out/restart.server.log" 2>&1 &
  server=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 1; done
}
start_server "$@"
"$venv/bin/python" "$here/load.py" restart --out "$out" --base "http://127.0.0.1:$port" --pre 10 --post 10 \
  --phase "$light" --phase "$light,pause=20,wait_health=1" >"$out/restart.load.log" 2>&1 &
load=$!
until grep -q "^phase 0 end" "$out/restart.load.log"; do sleep 1; done
sleep 5                                   # a few idle scrapes before the stop
date +%s.%N >"$out/restart.sigint_at"
kill -INT "$server"; wait "$server" || true
date +%s.%N >"$out/restart.exited_at"
start_server "$@"
date +%s.%N >"$out/restart.up_at"           # /health answers again
wait "$load"
kill -INT "$server"; wait "$server" || true
