#!/usr/bin/env bash
# One command from a fresh clone: install what the tests need, then lint, type-check and test.
# Installs Debian's prometheus, prometheus-alertmanager, chromium and nodejs/npm (for Grafana's dashboard schema)
# when running as root and they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v promtool >/dev/null || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need+=(prometheus-alertmanager)
command -v chromium >/dev/null || need+=(chromium)
# kubectl v1.32 (kustomize v5.5, for tests/test_kubernetes_manifests.py) is preinstalled on these machines;
# Debian only has kubernetes-client 1.20, whose kustomize cannot render deploy/kubernetes, so it is not installed here.
command -v node >/dev/null && command -v npm >/dev/null || need+=(nodejs npm)
lean=()
command -v docker-compose >/dev/null || lean+=(docker-compose)  # only to validate docker-compose.yml offline
if [ $((${#need[@]} + ${#lean[@]})) -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    [ ${#need[@]} -eq 0 ] || apt-get install -y -qq "${need[@]}" >/dev/null
    [ ${#lean[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends "${lean[@]}" >/dev/null
  else
    echo "note: ${need[*]} ${lean[*]} missing and not root: integration tests will be skipped" >&2
  fi
fi
# Each phase's wall time goes to stderr at the end, so a slow CI says where its minutes went.
phases=()
started=0  # SECONDS counts from the script's start: the first phase is the apt check above
phase() { phases+=("$(printf '%5ds  %s' $((SECONDS - started)) "$1")"); started=$SECONDS; }
report() { printf 'phase times:\n' >&2; printf '  %s\n' "${phases[@]}" >&2; }
trap report EXIT
phase "apt (missing Debian packages)"
npm_pid=
if command -v node >/dev/null && command -v npm >/dev/null; then
  # @grafana/schema and typescript, pinned by the lock file, for tests/test_dashboards_schema.py; in the background
  # while pip installs (both mostly wait on downloads), from npm's cache when it has the pinned versions.
  (cd tests/grafana_schema && npm ci --prefer-offline --no-audit --no-fund --loglevel=error >/dev/null) &
  npm_pid=$!
fi
python3 -m venv .venv
quiet() { grep -v "^WARNING: Location 'file://" || true; }  # this image's pip config lists local indexes that may be absent
.venv/bin/pip install -q -e ".[test]" 2>&1 | quiet
phase "venv + pip install"
[ -z "$npm_pid" ] || wait "$npm_pid"
phase "npm ci (waited for)"
.venv/bin/ruff check kvdoctor tests benchmarks tools
.venv/bin/ruff format --check kvdoctor tests benchmarks tools
phase "ruff"
# mypy's cache outside the checkout, so a fresh clone on a machine that ran this before re-checks only what changed
# (mypy compares file hashes when mtimes differ); on a new machine it is just empty.
.venv/bin/mypy --cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/kvdoctor/mypy" kvdoctor
phase "mypy"
.venv/bin/lint-imports --no-cache  # imports only go down the pipeline (pyproject [tool.importlinter])
phase "lint-imports"
# Bytecode (and pytest's rewritten test modules) outside the checkout, even where the image sets
# PYTHONDONTWRITEBYTECODE: otherwise every worker and every `python -m kvdoctor` a test starts compiles it all again.
export PYTHONPYCACHEPREFIX="${XDG_CACHE_HOME:-$HOME/.cache}/kvdoctor/pycache"
unset PYTHONDONTWRITEBYTECODE
# Collected once first: it says how many tests there are, refuses a run that would test nothing (pytest's exit 5),
# and leaves the rewritten modules compiled for the workers, which would each rewrite them all.
collected=$(.venv/bin/python -m pytest -q -p no:cacheprovider -m "" --collect-only "$@" | tail -n 1) || true
echo "$collected" >&2
if ! [[ "$collected" =~ ^([0-9]+)(/[0-9]+)?\ tests?\ collected ]] || [ "${BASH_REMATCH[1]}" -eq 0 ]; then
  echo "error: pytest would run no tests: $collected" >&2
  exit 1
fi
phase "pytest --collect-only"
# Every test, the default suite and the slow ones, in one run on parallel workers (pytest-xdist): many tests wait on
# subprocesses and servers, so more workers than cores pays. loadfile keeps a file's tests on one worker, so a
# module's expensive fixture (a backfilled Prometheus) is built once; by fixture groups (loadgroup) the tests of one
# module could land on several workers that each built it. Files are handed out in tests/conftest.py's order (files
# with slow tests first; xdist's own reorder goes by test count only). Replays shared across modules go through
# tests/support/replays.py, which the workers share on disk.
rc=0
.venv/bin/python -m pytest -q -p no:cacheprovider -m "" -n "${KVDOCTOR_TEST_WORKERS:-4}" --dist loadfile \
  --no-loadscope-reorder --durations=25 "$@" || rc=$?  # the 25 longest: where the minutes go
phase "pytest (default + slow)"
if [ "$rc" -eq 5 ]; then
  echo "error: pytest ran no tests (exit 5)" >&2
  exit 1
fi
exit "$rc"
