#!/usr/bin/env bash
# Install fairpod with everything its tests need into .venv, then run the whole suite (ruff + pytest).
# Needs Python 3.11 and the package mirrors: PyPI (fairpod, Ray, torch CPU, mypyc), npm (code-server) and Debian (chromium for the
# dashboard test, gcc and Python's headers for the native engine's test; installed when missing and we are root).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# --no-compile, then compileall on every core once all is installed: pip compiles each package's files on one
# core (a fresh install: 66 s with pip compiling, 50 s so)
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check --no-compile)
"${PIP[@]}" -e '.[test,ray,postgres]'
# torch CPU for the distributed-training example (a pinned CPU build; never a multi-GB CUDA download)
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  "${PIP[@]}" torch==2.13.0 || echo "warning: could not install torch; the training example tests will be skipped"
fi
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) \
    >/dev/null || echo "warning: could not install chromium; the dashboard browser test will be skipped"
fi
# PostgreSQL server binaries for the store's and the control plane's PostgreSQL tests
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql) \
    >/dev/null || echo "warning: could not install postgresql; the PostgreSQL tests will be skipped"
fi
# a C compiler and Python's headers, for the test that compiles the native engine (fairpod.native)
if ! .venv/bin/python -c "import fairpod.native as n, sys; sys.exit(1 if n.missing() else 0)" 2>/dev/null \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc \
    "python$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')-dev") >/dev/null \
    || echo "warning: could not install gcc and Python's headers; the native engine test will be skipped"
fi
# munge (MUNGE, as Slurm uses) for the identity test (tests/server/access/test_identity_live.py): it starts its own munged
# with its own key and socket directory; the package's own daemon is not used
if ! { command -v munged && command -v munge && command -v unmunge; } >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends munge) \
    >/dev/null || echo "warning: could not install munge; the identity test will be skipped"
fi
# podman with runc (crun cannot set limits on cgroup v1/v2 hybrid hosts), busybox-static and mmdebstrap for the
# container tests: they build their images from the Debian mirror once and keep them in podman's storage
if ! { command -v podman && command -v runc && command -v busybox && command -v mmdebstrap; } >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc \
    catatonit busybox-static mmdebstrap) >/dev/null \
    || echo "warning: could not install podman, runc, busybox-static and mmdebstrap; the container tests will be skipped"
fi
# code-server for the code-server space test (tests/dashboard/test_space_code_server.py), from the npm registry
# (about a minute: it builds native modules), beside the compiling below; a machine without Node.js skips it
bash scripts/install-code-server.sh > .venv/code-server.log 2>&1 &
CODE_SERVER=$!
# (some packages ship files that are not Python 3 on purpose: pip skips them silently, and so does this)
.venv/bin/python -m compileall -q -j 0 .venv/lib >/dev/null 2>&1 || true
# and fairpod's own sources (an editable install: nothing compiled them) and the tests' helpers: with
# PYTHONDONTWRITEBYTECODE set no process writes them, and then every `fairpod up`, CLI call, replica supervisor
# and fork server the suite starts compiles what it imports from source again (importing fairpod.server.api.app:
# 1.37 CPU-s so, 1.0 from the compiled files)
.venv/bin/python -m compileall -q -j 0 src tests >/dev/null 2>&1 || true
wait "$CODE_SERVER" || { echo "warning: code-server was not installed; the code-server space test will be skipped:"; \
  tail -3 .venv/code-server.log; }
echo "== ruff"
.venv/bin/ruff check src tests benchmarks examples
echo "== pytest"
# in parallel (pytest-xdist): most tests wait on processes and I/O (with 4 workers on 2 cores the CPUs were idle
# 39 % of the run), so twice as many workers as cores and one more (at least 5); --dist loadgroup keeps each group
# of tests that share a fixed resource on one worker (tests/conftest.py; the Ray group alone is ~1/5 of the suite).
# FAIRPOD_TEST_WORKERS overrides the count; arguments given here come last, so `-n 0` runs serially.
WORKERS=${FAIRPOD_TEST_WORKERS:-$(( $(nproc) * 2 + 1 > 5 ? $(nproc) * 2 + 1 : 5 ))}
# pytest keeps the test modules it rewrote for their asserts only where Python may write bytecode: without that
# each of the workers (and each pytest a test starts) rewrites them all again (collecting: 15.3 CPU-s, 10.7 so)
env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest -n "$WORKERS" --dist loadgroup --durations=25 "$@"  # the 25 slowest, for the wall time
