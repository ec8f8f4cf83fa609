#!/usr/bin/env bash
# Install fairpod with its test dependencies into .venv and run the whole test suite (lint + pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
echo "== ruff"
.venv/bin/ruff check src tests benchmarks
echo "== pytest"
.venv/bin/python -m pytest "$@"
