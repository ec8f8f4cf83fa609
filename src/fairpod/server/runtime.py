"""The composition root: builds the executor, the store, the control plane and its parts, and the HTTP app.

Nothing else in ``fairpod.server`` picks concrete classes: the core takes a store and an executor, the parts
(node membership, usage, node health) take the core, the app takes the core. ``fairpod up`` calls
:func:`build` and serves :attr:`Runtime.app`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairpod.executors.base import Executor, Notifying, capability
from fairpod.paths import runs_dir
from fairpod.server.control import ControlPlane
from fairpod.store import Store

log = logging.getLogger("fairpod")
EXECUTORS = ("local", "ray", "timed")


def make_executor(home: Path, kind: str, ray_address: str = "auto", ray_namespace: str = "fairpod") -> Executor:
    """The executor of ``kind`` on ``home``; ExecutorError or ValueError with one line if it cannot be had."""
    root = runs_dir(home)
    if kind == "local":
        from fairpod.executors.local import LocalExecutor

        return LocalExecutor(root)
    if kind == "timed":  # benchmarks and tests only: runs no processes
        from fairpod.executors.timed import TimedExecutor

        log.warning("executor 'timed' (benchmarks/tests only): jobs run NO processes; "
                    "each only waits out its FAIRPOD_BENCH_DURATION or 'sleep N'")
        return TimedExecutor(root)
    if kind == "ray":  # the nodes of a Ray cluster (docs/ray.md)
        from fairpod.executors.ray import RayExecutor

        ex = RayExecutor(root, address=ray_address, namespace=ray_namespace)
        log.info("executor ray: cluster %s, namespace %s", ex.address, ray_namespace)
        return ex
    raise ValueError(f"unknown executor {kind!r} ({', '.join(EXECUTORS)})")


@dataclass
class Runtime:
    store: Store
    executor: Executor
    cp: ControlPlane
    app: Any  # fastapi.FastAPI
    secret: bytes

    def start(self) -> None:
        self.cp.start()
        if self.cp.health is not None:
            self.cp.health.start()

    def close(self) -> None:
        if self.cp.health is not None:
            self.cp.health.stop()
        self.cp.stop()
        self.store.close()


def build(home: Path, url: str, executor: Executor, api_url: str, *, health: bool = True) -> Runtime:
    """Store (``url``), control plane over ``executor``, node health, and the app; nothing runs yet."""
    from fairpod.health.manager import HealthManager
    from fairpod.server.app import create_app
    from fairpod.server.jobtoken import job_secret, launch_env

    # WAL with synchronous=NORMAL: a commit survives a crash of this process (what the replicas and the
    # tests rely on); only an OS crash or power cut may lose the last commits, never the database's integrity.
    store = Store(url, synchronous="NORMAL")
    store.create_all()
    cp = ControlPlane(store, executor, home)
    secret = job_secret(home, store)
    cp.launch_env = launch_env(secret, api_url)  # FAIRPOD_API_URL, FAIRPOD_TOKEN
    notifying = capability(executor, Notifying)
    if notifying is not None:  # the executor wakes the reconcile loop when an exit is due
        notifying.set_notify(cp.wake.set)
    if health:
        cp.health = HealthManager(cp, interval=float(os.environ.get("FAIRPOD_AGENT_INTERVAL", "10")),
                                  reboot_seconds=float(os.environ.get("FAIRPOD_REBOOT_SECONDS", "2")))
    return Runtime(store, executor, cp, create_app(cp, secret), secret)


__all__ = ["EXECUTORS", "Runtime", "build", "make_executor"]
