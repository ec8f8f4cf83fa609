#!/usr/bin/env bash
# Install fairpod into .venv and run the demo: the seed scenario of two teams (john, smith) sharing
# 4 x ml.g5.12xlarge, replayed through the governance engine. Writes out/seed-report.json and out/seed-usage.png.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
mkdir -p out
.venv/bin/fairpod validate examples/seed/spec.yaml
.venv/bin/fairpod simulate examples/seed/spec.yaml examples/seed/trace.csv -o out/seed-report.json \
  --plot out/seed-usage.png --jobs
echo "report: out/seed-report.json   plot: out/seed-usage.png"
