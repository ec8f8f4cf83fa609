"""The composition root: builds the executor, the store, the control plane and its parts, and the HTTP app.

Nothing else in ``fairpod.server`` picks concrete classes: the core takes a store and an executor, the parts
(node membership, usage, node health) take the core, the app takes the core. ``fairpod up`` calls
:func:`build` and serves :attr:`Runtime.app`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from fairpod.executors import registry
from fairpod.executors.base import Executor, Notifying, Traits, capability
from fairpod.paths import runs_dir
from fairpod.server.core import (
    Beside,
    ControlPlane,
    Foreign,
    Poke,
    Services,
    WorkerCore,
    standard_keepers,
)
from fairpod.server.ha.leader import Elector, FencedExecutor
from fairpod.server.runtime import heap
from fairpod.server.runtime.steadyclock import control_clock
from fairpod.store import Store
from fairpod.store.db import use_clock
from fairpod.store.notify import Listener
from fairpod.store.writers import writers_turn

# the store's meta key where a core that takes in others' submits keeps its executor's Traits (read by `fairpod api`)
TRAITS_META = "core_executor_traits"

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
    listener: Listener | None = None  # PostgreSQL: others' submit commits wake the loop (fairpod.store.notify)

    def start(self) -> None:
        if self.listener is not None:
            self.listener.start()
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
        if self.listener is not None:
            self.listener.stop()
        self.store.close()


def build(home: Path, url: str, executor: Executor, api_url: str, *, health: bool = True,
          elector: Elector | None = None, own_heap: bool = False, api_workers: bool = False) -> Runtime:
    """Store (``url``), control plane over ``executor``, node health, and the app; nothing runs yet. With an
    ``elector`` (``fairpod up --ha``), every store write and executor action is fenced by its lease.
    ``own_heap`` (a server process, not a test): the memory is built with the cycle collector off, what it
    built is frozen, and the reconcile loop keeps full collections short (:mod:`fairpod.server.runtime.heap`).
    ``api_workers``: API worker processes commit submits too; the core takes them in at each turn
    (:mod:`fairpod.server.core.foreign`), woken by their datagrams (:mod:`fairpod.server.runtime.wakes`, which
    ``fairpod up`` listens to)."""
    if not own_heap:
        return _build(home, url, executor, api_url, health, elector, api_workers)
    heap.watch()
    with heap.building():
        rt = _build(home, url, executor, api_url, health, elector, api_workers)
        # frozen before the collector is on again: its first collection after would walk all of it once more
        # (~0.6 s at 127,000 unfinished jobs, a restart's time)
        took = heap.settle()
    log.info("memory built; the cycle collector leaves it out from now on (%.2f s)", took)
    rt.cp.keepers.after.append(heap.Heap().tick)
    return rt


def _build(home: Path, url: str, executor: Executor, api_url: str, health: bool, elector: Elector | None,
           api_workers: bool = False) -> Runtime:
    from fairpod.health.manager import HealthManager
    from fairpod.server.access.jobtoken import job_secret, launch_env
    from fairpod.server.api.app import create_app
    from fairpod.server.services.spaces import open_proxy, stop_idle

    # WAL with synchronous=NORMAL: a commit survives a crash of this process (what the replicas and the
    # tests rely on); only an OS crash or power cut may lose the last commits, never the database's integrity.
    store = Store(url, synchronous="NORMAL")
    if api_workers:  # its workers write too
        _in_turns(store, home)
    if elector is not None:
        elector.guard(store)
        executor = cast(Executor, FencedExecutor(executor, elector))
    store.create_all()
    # other processes commit submits: API workers, or `fairpod api` on any host of a PostgreSQL database
    foreign = api_workers or store.dialect == "postgresql"
    seen = store.last_seq() if foreign else 0  # read before the memory: a later commit is taken at a turn
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
    app = create_app(cp, secret)
    if foreign:
        cp.keepers.before.insert(0, Foreign(seen).take)
        store.set_meta(TRAITS_META, json.dumps(dataclasses.asdict(Traits.of(executor))))  # what `fairpod api` checks
    # PostgreSQL: a submit committed by an API worker or `fairpod api` wakes the loop through the database
    listener = Listener(url, cp.wake.set) if store.dialect == "postgresql" else None
    return Runtime(store, executor, cp, app, secret, listener)


def build_worker(home: Path, url: str, traits: Traits, core_url: str, secret: bytes | None = None,
                 wake: socket.socket | None = None) -> Any:
    """An API worker's app (:mod:`fairpod.server.api.worker_app`) over its own store connections: submits
    checked against the stored spec and ``traits`` (the core's executor), committed, and the core woken (on
    SQLite by a datagram on ``wake``, the worker's end of the core's :class:`~fairpod.server.runtime.wakes.Wakes`;
    None: not woken, its periodic turn takes the jobs); every other request forwarded to ``core_url``.
    ``secret``: the job secret (default: the home's, as the core reads it)."""
    from fairpod.server.access.jobtoken import job_secret
    from fairpod.server.api.worker_app import create_worker_app

    store = Store(url, synchronous="NORMAL")
    _in_turns(store, home)
    secret = job_secret(home, store) if secret is None else secret
    # PostgreSQL: the submit's commit notifies the core (fairpod.store.notify); SQLite: a datagram on `wake`
    poke = None if store.dialect == "postgresql" or wake is None else Poke(wake)
    cp = WorkerCore(store, home, traits, poke)
    return create_worker_app(cp, secret, core_url)  # type: ignore[arg-type]  # the part of Core the job routes use


def _in_turns(store: Store, home: Path) -> None:
    """On SQLite, ``store``'s write transactions take their turn among every writer of ``home`` (the core and its
    API workers, :mod:`fairpod.store.writers`); PostgreSQL's transactions wait on rows instead."""
    if store.dialect == "sqlite":
        store.turn = writers_turn(home)


__all__ = ["TRAITS_META", "Runtime", "build", "build_worker", "control_plane", "make_executor"]
