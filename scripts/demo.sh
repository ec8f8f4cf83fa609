#!/usr/bin/env bash
# Install fairpod into .venv and start it on this machine: the control plane on 127.0.0.1:8470 with the
# demo cluster (4 x ml.g5.12xlarge of virtual accelerator slots, teams john and smith), jobs run as local
# processes. Stop it with: .venv/bin/fairpod down
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
.venv/bin/fairpod up "$@"
echo
echo "Try:  source .venv/bin/activate"
echo "      fairpod cluster show"
echo "      fairpod start-job --name train --team john --node-count 2 -- sleep 600"
echo "      fairpod list-jobs"
