"""``fairpod up --api-workers N`` starts its API workers before the core builds its memory (seconds at datacenter
size: benchmarks/README.md, "Restart"): they import and build their app on the other cores meanwhile, answer
``/healthz`` with 502 "core unavailable" (not healthy: the core does not serve yet) and take submits, which the
core's first turn admits once its memory is built. The core's build is held here by a gate the test opens (a
launcher that wraps ``wiring.build``; nothing else of fairpod changed), so nothing depends on the machine's speed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from ... import httpclient, reaper
from ..conftest import SEED_SPEC, Server, wait_for

LAUNCHER = """
import os, sys, time
from fairpod.server.runtime import wiring
_build = wiring.build
def build(*a, **k):  # the core's memory built only once the test opens the gate
    gate = os.environ["FAIRPOD_TEST_BUILD_GATE"]
    open(gate + ".waiting", "w").close()
    for _ in range(6000):  # bounded: ten minutes
        if os.path.exists(gate):
            break
        time.sleep(0.1)
    return _build(*a, **k)
wiring.build = build
from fairpod.cli.main import main
sys.exit(main())
"""


def test_workers_take_submits_while_the_core_builds_its_memory(tmp_path: Path) -> None:
    s = Server(tmp_path, SEED_SPEC)
    gate = tmp_path / "gate"
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    s.home.mkdir(parents=True)
    env = {**s.env, "FAIRPOD_TEST_BUILD_GATE": str(gate)}
    log = open(tmp_path / "server.out", "ab")  # noqa: SIM115 - the server's, closed with it
    s.proc = subprocess.Popen([sys.executable, str(launcher), "up", "--foreground", "--port", str(s.port), "--spec",
                               str(SEED_SPEC), "--api-workers", "1"], env=env, stdout=log, stderr=log,
                              start_new_session=True)
    reaper.started(s.proc.pid)
    try:
        wait_for(lambda: Path(str(gate) + ".waiting").exists() or s.proc.poll() is not None, 60,
                 "the core to start building its memory")
        assert s.proc.poll() is None, (tmp_path / "server.out").read_text()[-3000:]

        def answered() -> httpx.Response | None:
            try:
                return httpclient.get(s.url + "/healthz", timeout=2)
            except httpx.HTTPError:
                return None

        r = wait_for(answered, 60, "a worker to answer on the public port while the core builds")
        assert r.status_code == 502 and "core unavailable" in r.text, r.text  # not healthy: no core yet
        s.token = json.loads(Path(s.env["FAIRPOD_CONFIG"]).read_text())["token"]  # up wrote it before serving
        sub = s.api("POST", "/jobs", json={"name": "early", "team": "john", "instance_type": "ml.g5.12xlarge",
                                           "nodes": 1, "accelerators": 1, "command": ["true"]})
        assert sub.status_code == 201 and sub.json()["state"] == "Pending", sub.text
        assert not gate.exists() and s.proc.poll() is None  # still building: a worker took it alone
        gate.touch()
        wait_for(lambda: (a := answered()) is not None and a.status_code == 200, 60, "the core to serve")
        s.wait_state("early", "Succeeded", 60)
    finally:
        gate.touch()
        s.kill(signal.SIGTERM)
        s.kill_replicas()
        log.close()
