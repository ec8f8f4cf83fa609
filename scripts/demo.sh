#!/usr/bin/env bash
# Install fairpod into .venv and start it on this machine: the control plane on 127.0.0.1:8470 with the
# demo cluster (4 x ml.g5.12xlarge of virtual accelerator slots, teams john and smith), jobs run as local
# processes. Stop it with: .venv/bin/fairpod down
#   bash scripts/demo.sh [--no-install] [fairpod up's options, e.g. --port 8471]
# --no-install starts what .venv already holds (a second demo after 'fairpod down': no pip, no bytecode).
# It says when fairpod is ready, and how long the demo took to get there.
set -euo pipefail
SECONDS=0
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
step() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
install=1
if [ "${1:-}" = "--no-install" ]; then
  install=0
  shift
  [ -x .venv/bin/fairpod ] || { step "--no-install: .venv/bin/fairpod is not there; run bash scripts/demo.sh once"; exit 1; }
fi
if [ "$install" = 1 ] && [ ! -x .venv/bin/python ]; then
  step "creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
fi
if [ "$install" = 1 ]; then
  step "installing fairpod and its dependencies into .venv (pip; a minute or two the first time) ..."
  # pip's own progress, one line per package, so a slow download never looks like a hang
  .venv/bin/python -m pip install --disable-pip-version-check --progress-bar off -e . 2>&1 \
    | grep --line-buffered -E '^(Collecting|Successfully installed|ERROR)' | sed -u 's/^/    /' || true
  .venv/bin/python -c 'import fairpod.cli.main' || { step "the install failed; run: .venv/bin/python -m pip install -e ."; exit 1; }
  step "compiling fairpod's modules to bytecode (faster commands) ..."
  .venv/bin/python -m compileall -q src/fairpod >/dev/null || true
fi
# the engine compiled to C (mypyc) where a C compiler exists: the same decisions, about twice as fast. It is not
# built here, in the foreground (209 s of a demo's 4 min 52 s on 2 cores): 'fairpod up' starts the build in the
# background, at low priority, and the engine runs as Python until it is done ('fairpod up' and
# '.venv/bin/python -m fairpod.native status' say which runs)
step "starting fairpod (its engine is compiled to C in the background meanwhile, where it can be) ..."
# with .venv first on PATH, as after 'source .venv/bin/activate': the jobs' 'python' has fairpod's SDK
PATH="$PWD/.venv/bin:$PATH" .venv/bin/fairpod up "$@"
step "fairpod is ready, $SECONDS s after the demo started"
echo
echo "Try:  source .venv/bin/activate"
echo "      fairpod cluster show"
echo "      fairpod start-job --name train --team john --node-count 2 -- sleep 600"
echo "      fairpod list-jobs"
echo "      fairpod status; fairpod dashboard   # a one-time sign-in link to the dashboard"
echo "      source <(fairpod completion bash)   # tab completion"
