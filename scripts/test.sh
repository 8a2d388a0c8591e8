#!/usr/bin/env bash
# One command from a fresh clone: install what the tests need, then lint, type-check and test.
# Installs Debian's prometheus, prometheus-alertmanager and chromium when running as root and they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v promtool >/dev/null || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need+=(prometheus-alertmanager)
command -v chromium >/dev/null || need+=(chromium)
command -v docker-compose >/dev/null || need+=(docker-compose)  # validates docker-compose.yml offline
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "note: ${need[*]} missing and not root: integration tests will be skipped" >&2
  fi
fi
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e ".[test]"
.venv/bin/ruff check doctor tests benchmarks tools
.venv/bin/ruff format --check doctor tests benchmarks tools
.venv/bin/mypy doctor
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
