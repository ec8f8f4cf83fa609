"""A step of the wall clock ends no healthy job: a real ``fairpod up`` under libfaketime, its wall clock stepped an
hour ahead while a job with a runtime limit of 400 s and a job printing every 4 s with a hang timeout of 600 s run.
Before, the first ended ``Failed: the attempt ran 3619 s`` and the second ``Cancelled: no output for 3603 s``.
Durations are measured on the control plane's clock (fairpod.server.runtime.steadyclock), which the step does not move.

libfaketime: the PyPI package ``libfaketime`` (a test dependency) builds the C library, which is preloaded into the
server only; the step is written to its ``FAKETIME_TIMESTAMP_FILE`` (read at every call: ``FAKETIME_NO_CACHE``), and
``FAKETIME_DONT_FAKE_MONOTONIC`` leaves the monotonic clock alone, as a real step of the wall clock does. (Debian's
libfaketime 0.9.10 cannot be used: with that setting every ``time.sleep`` of Python 3.11 fails with EINVAL, and
without it ``threading.Event.wait`` never returns.)
"""

from __future__ import annotations

import importlib.util
import re
import signal
from pathlib import Path

import pytest

from ..conftest import SEED_SPEC, Server


def libfaketime() -> Path | None:
    spec = importlib.util.find_spec("libfaketime")  # not imported: only its built library is wanted
    if spec is None or spec.origin is None:
        return None
    lib = Path(spec.origin).parent / "vendor" / "libfaketime" / "src" / "libfaketime.so.1"
    return lib if lib.exists() else None


def test_a_step_of_the_wall_clock_ends_no_healthy_job(tmp_path: Path) -> None:
    lib = libfaketime()
    if lib is None:
        pytest.skip("needs libfaketime: the PyPI package libfaketime (pip install -e '.[test]')")
    step = tmp_path / "faketime"
    step.write_text("+0\n")
    s = Server(tmp_path, SEED_SPEC)
    s.env.update(LD_PRELOAD=str(lib), FAKETIME_TIMESTAMP_FILE=str(step), FAKETIME_NO_CACHE="1",
                 FAKETIME_DONT_FAKE_MONOTONIC="1")
    s.start()
    try:
        s.submit(name="limited", team="john", command=["sleep", "600"], max_runtime_seconds=400)
        s.submit(name="chatty", team="smith", command=["sh", "-c", "while true; do echo tick; sleep 4; done"],
                 hang_timeout_seconds=600, hang_action="cancel")
        s.wait_state("limited", "Running")
        s.wait_state("chatty", "Running")
        step.write_text("+3600\n")  # the server's wall clock: one hour ahead from now on
        # a job with a limit of 3 s, started after the step, ends after 3 s: by then the watchdog has looked at the
        # others a few times (once a second), on the same clock
        s.submit(name="canary", team="john", command=["sleep", "600"], max_runtime_seconds=3)
        canary = s.wait_state("canary", "Failed", 60)
        ran = re.search(r"the attempt ran (\d+) s", canary["reason"])
        assert ran is not None and 3 <= int(ran.group(1)) < 60, canary["reason"]  # not 3603 s
        for name in ("limited", "chatty"):
            job = s.job(name)
            assert job["state"] == "Running", f"{name}: {job['state']}: {job['reason']}"
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()
