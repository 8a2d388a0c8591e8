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
python3 -m venv .venv
quiet() { grep -v "^WARNING: Location 'file://" || true; }  # this image's pip config lists local indexes that may be absent
.venv/bin/pip install -q --upgrade pip 2>&1 | quiet
.venv/bin/pip install -q -e ".[test]" 2>&1 | quiet
if command -v node >/dev/null && command -v npm >/dev/null; then
  # @grafana/schema and typescript, pinned by the lock file, for tests/test_dashboards_schema.py
  (cd tests/grafana_schema && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
.venv/bin/ruff check kvdoctor tests benchmarks tools
.venv/bin/ruff format --check kvdoctor tests benchmarks tools
.venv/bin/mypy kvdoctor
.venv/bin/lint-imports --no-cache  # imports only go down the pipeline (pyproject [tool.importlinter])
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"             # the default suite (not slow)
.venv/bin/python -m pytest -q -p no:cacheprovider -m slow "$@"     # then the slow ones: CI runs every test
