#!/usr/bin/env bash
# One command from a fresh clone: install kvdoctor in .venv and run the demo (no GPU, no vLLM, no config).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e .
exec .venv/bin/kvdoctor demo "$@"
