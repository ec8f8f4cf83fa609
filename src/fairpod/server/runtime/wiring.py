"""The composition root: builds the executor, the store, the control plane and its parts, and the HTTP app.

Nothing else in ``fairpod.server`` picks concrete classes: the core takes a store and an executor, the parts
(node membership, usage, node health) take the core, the app takes the core. ``fairpod up`` calls
:func:`build` and serves :attr:`Runtime.app`.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from fairpod.executors import registry
from fairpod.executors.base import Executor, Notifying, capability
from fairpod.paths import runs_dir
from fairpod.server.core import Beside, ControlPlane, Services, standard_keepers
from fairpod.server.ha.leader import Elector, FencedExecutor
from fairpod.server.runtime import heap
from fairpod.server.runtime.steadyclock import control_clock
from fairpod.store import Store
from fairpod.store.db import use_clock

log = logging.getLogger("fairpod")


def control_plane(store: Store, executor: Executor, home: Path, **kw: Any) -> ControlPlane:
    """The control plane over ``store`` and ``executor`` with what runs beside it (ETA estimates, the usage sampler,
    retention): those stand on the core's door, so they are built here, not by the core (``kw``: ControlPlane's)."""
    from fairpod.server.accounting.eta import Estimates
    from fairpod.server.accounting.usage import UsageSampler
    from fairpod.server.keepers.retention import Retention

    return ControlPlane(store, executor, home, beside=Beside(Estimates(), UsageSampler(), Retention()), **kw)


def make_executor(home: Path, kind: str, options: dict[str, str] | None = None, exclusive: bool = True) -> Executor:
    """The executor of ``kind`` (:mod:`fairpod.executors.registry`) on ``home`` with its own ``options`` (by
    name, e.g. Ray's ray_address; the registry's defaults for those not given); ExecutorError or ValueError with
    one line if it cannot be had. ``exclusive=False``: the lease of ``--ha`` keeps other control planes off the runs
    directory, not the executor's own lock (a stopped old leader may still hold that)."""
    ex = registry.get(kind)
    given = {o.name: o.default for o in ex.options} | (options or {})
    return ex.make(runs_dir(home), **given, exclusive=exclusive)


@dataclass
class Runtime:
    store: Store
    executor: Executor
    cp: ControlPlane
    app: Any  # fastapi.FastAPI
    secret: bytes

    def start(self) -> None:
        self.cp.start()
        if self.cp.services is not None:
            self.cp.services.start()
        if self.cp.health is not None:
            self.cp.health.start()

    def close(self) -> None:
        if self.cp.health is not None:
            self.cp.health.stop()
        if self.cp.services is not None:
            self.cp.services.stop()
        self.cp.stop()
        self.store.close()


def build(home: Path, url: str, executor: Executor, api_url: str, *, health: bool = True,
          elector: Elector | None = None, own_heap: bool = False) -> Runtime:
    """Store (``url``), control plane over ``executor``, node health, and the app; nothing runs yet. With an
    ``elector`` (``fairpod up --ha``), every store write and executor action is fenced by its lease.
    ``own_heap`` (a server process, not a test): the memory is built with the cycle collector off, what it
    built is frozen, and the reconcile loop keeps full collections short (:mod:`fairpod.server.runtime.heap`)."""
    if not own_heap:
        return _build(home, url, executor, api_url, health, elector)
    heap.watch()
    with heap.building():
        rt = _build(home, url, executor, api_url, health, elector)
    log.info("memory built; the cycle collector leaves it out from now on (%.2f s)", heap.settle())
    rt.cp.keepers.after.append(heap.Heap().tick)
    return rt


def _build(home: Path, url: str, executor: Executor, api_url: str, health: bool, elector: Elector | None) -> Runtime:
    from fairpod.health.manager import HealthManager
    from fairpod.server.access.jobtoken import job_secret, launch_env
    from fairpod.server.api.app import create_app
    from fairpod.server.services.spaces import open_proxy, stop_idle

    # WAL with synchronous=NORMAL: a commit survives a crash of this process (what the replicas and the
    # tests rely on); only an OS crash or power cut may lose the last commits, never the database's integrity.
    store = Store(url, synchronous="NORMAL")
    if elector is not None:
        elector.guard(store)
        executor = cast(Executor, FencedExecutor(executor, elector))
    store.create_all()
    clock = control_clock(home)  # durations a step of the wall clock does not move (server.runtime.steadyclock)
    if clock is not None:
        use_clock(clock)
    cp = control_plane(store, executor, home, keepers=standard_keepers,  # a new periodic keeper: register it there
                      clock=clock or time.time)
    secret = job_secret(home, store)
    cp.launch_env = launch_env(secret, api_url)  # FAIRPOD_API_URL, FAIRPOD_TOKEN
    # readiness, endpoints, addresses and drains of services (cp.services); spaces' proxies and idle stops
    Services(cp, open_space=open_proxy, stop_idle=stop_idle)
    notifying = capability(executor, Notifying)
    if notifying is not None:  # the executor wakes the reconcile loop when an exit is due
        notifying.set_notify(cp.wake.set)
    if health:
        cp.health = HealthManager(cp, interval=float(os.environ.get("FAIRPOD_AGENT_INTERVAL", "10")),
                                  reboot_seconds=float(os.environ.get("FAIRPOD_REBOOT_SECONDS", "2")))
    return Runtime(store, executor, cp, create_app(cp, secret), secret)


__all__ = ["Runtime", "build", "control_plane", "make_executor"]
