#!/usr/bin/env bash
# One command from a fresh clone: install kvdoctor in .venv and run the demo (no GPU, no vLLM, no config).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
quiet() { grep -v "^WARNING: Location 'file://" || true; }  # this image's pip config lists local indexes that may be absent
.venv/bin/pip install -q --upgrade pip 2>&1 | quiet
.venv/bin/pip install -q -e . 2>&1 | quiet
exec .venv/bin/kvdoctor demo "$@"
