"""The service probe round (``Services._probe_loop``) is idle while no service runs: it looks again only every
``IDLE_WAIT`` seconds (each round takes the core's lock and looks at every live attempt, ~30,000 at 10,000
nodes), and a service's launch wakes it at once (``Services.poke``), so a new service's replicas are probed and
serve without waiting out the idle pause. In-process: a real SQLite store, the local executor and a real HTTP
replica; the idle pause is set to an hour, so only the launch's wake can make the service ready in time."""

from __future__ import annotations

import queue
import sys
import time

import pytest

from fairpod.model.jobs import JobSpec
from fairpod.model.services import ServiceSpec
from fairpod.server.core import ControlPlane
from fairpod.server.core.transitions import services as services_mod
from fairpod.server.core.transitions.services import Services

REPLICA = ("import http.server, os\n"
           "http.server.ThreadingHTTPServer(('127.0.0.1', int(os.environ['PORT'])),"
           " http.server.SimpleHTTPRequestHandler).serve_forever()\n")


def test_an_idle_probe_round_is_woken_by_a_service_launch(cp: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services_mod, "IDLE_WAIT", 3600.0)
    services = Services(cp, interval=0.05)
    rounds: queue.Queue[bool] = queue.Queue()
    probe_once = services.probe_once

    def counted() -> bool:
        busy = probe_once()
        rounds.put(busy)
        return busy

    monkeypatch.setattr(services, "probe_once", counted)
    services.start()
    try:
        assert rounds.get(timeout=30) is False  # no service: the round found nothing, and waits for an hour
        job = cp.submit(JobSpec(name="web", team="john", command=[sys.executable, "-c", REPLICA],
                                service=ServiceSpec()), "tester")
        deadline = time.monotonic() + 60
        while not services.endpoints(job.id) and time.monotonic() < deadline:
            cp.reconcile_once()  # admits and launches it (the launch picks its port and wakes the round)
            time.sleep(0.05)
        assert services.endpoints(job.id), "the launched service was never probed ready"
        assert True in [rounds.get_nowait() for _ in range(rounds.qsize())]
    finally:
        services.stop()
