"""A ControlPlane built in-process: real SQLite store, the timed executor and a FAKE clock (tests only).

The timed executor runs no processes: each replica "runs" for its job's ``sleep N`` and ends with exit 0. The
fake clock moves only when a test calls ``advance``; the control plane and the executor read the same clock,
so every turn of the reconcile loop (``turn``) sees exactly the time the test set.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fairpod.executors.base import JobLaunch
from fairpod.executors.timed import TimedExecutor
from fairpod.model.jobs import JobSpec
from fairpod.model.spec import load_spec
from fairpod.server.nodes import sync_nodes
from fairpod.server.runtime.wiring import control_plane
from fairpod.store import Store
from fairpod.store.records import Job

from .faults import fail_writes

SEED_SPEC = Path(__file__).resolve().parents[2] / "examples" / "seed" / "spec.yaml"


class FakeClock:
    """A FAKE clock (tests only): time stands still until ``advance``."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class InProc:
    """One in-process control plane over ``tmp``; ``restart()`` builds a new one on the same store."""

    def __init__(self, tmp: Path, spec: Path = SEED_SPEC) -> None:
        self.tmp = tmp
        self.clock = FakeClock()
        self.store = Store(f"sqlite:///{tmp / 'fairpod.db'}")
        self.store.create_all()
        cluster = load_spec(str(spec))
        sync_nodes(self.store, cluster)
        self.store.put_spec(cluster)
        self.executor = TimedExecutor(tmp / "runs", clock=self.clock)
        self.cp = control_plane(self.store, self.executor, tmp, clock=self.clock)
        self._faults: list[Callable[[], None]] = []

    def submit(self, name: str, team: str, seconds: float = 60, **kw: Any) -> Job:
        return self.cp.submit(JobSpec(name=name, team=team, command=["sleep", str(seconds)], **kw), "tester")

    def turn(self, n: int = 1) -> None:
        for _ in range(n):
            self.cp.reconcile_once()

    def job(self, name: str) -> Job:
        (job,) = [j for j in self.store.list_jobs() if j.name == name]
        return job

    def events(self, job: Job | None = None, kind: str | None = None) -> list[Any]:
        evs = self.store.list_events(job_id=job.id if job else None, limit=10_000)
        return [e for e in evs if kind is None or e.kind == kind]

    def kinds(self, name: str) -> list[str]:
        """The kinds of the events of job ``name``, oldest first."""
        return [e.kind for e in self.events(self.job(name))]

    def before_launch(self, hook: Callable[[JobLaunch], None]) -> None:
        """Call ``hook(launch)`` each time the executor is asked to start an attempt, just before it does."""
        real = self.executor.launch

        def launch(job: JobLaunch) -> None:
            hook(job)
            real(job)

        self.executor.launch = launch  # type: ignore[method-assign]

    def fail_writes(self, when: Callable[[], bool] = lambda: True,
                    error: BaseException | type[BaseException] | None = None) -> Callable[[], None]:
        """Every later write to the database fails (``error``; default SQLite's "database or disk is full") while
        ``when()`` holds, whoever writes (``faults.fail_writes``). Returns the function that ends it; ``heal`` ends
        them all."""
        self._faults.append(fail_writes(self.store.engine, when, error))
        return self._faults[-1]

    def heal(self) -> None:
        """End every fault of ``fail_writes``."""
        while self._faults:
            self._faults.pop()()

    def close(self) -> None:
        self.heal()
        self.cp.stop()
        self.store.close()
