"""The loop: one turn (:meth:`Loop.reconcile_once`) takes the replicas' exits, runs one engine cycle, applies its
decisions, commits, acknowledges the exits, launches what is ready; the periodic keepers the composition root
registers (:func:`standard_keepers`) run before the exits are taken and after the commit."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fairpod.executors.base import ReplicaExit
from fairpod.governance import Admit, Preempt, Wait, net_changes, schedule
from fairpod.governance.decisions import Grow, Shrink
from fairpod.model.keys import job_id_of
from fairpod.server.core.published import AsOf, Published
from fairpod.server.core.state import CoreState
from fairpod.server.core.transitions import (
    admit,
    array_holds,
    backoff,
    exit,
    launch,
    membership,
    resize,
    restarts,
)
from fairpod.server.core.transitions.readiness import Readiness
from fairpod.server.core.turns import TurnHistogram, TurnPace
from fairpod.server.keepers import diskfull, outage
from fairpod.server.runs import from_engine

log = logging.getLogger("fairpod.control")

Keeper = Callable[[Any], None]  # called with the control plane, under its lock, once a turn


@dataclass
class Keepers:
    """What runs at every turn of the loop beside the engine, in order."""

    before: list[Keeper] = field(default_factory=list)  # before this turn's exits are taken
    after: list[Keeper] = field(default_factory=list)  # after the turn's commit, before the launches


@dataclass
class Beside:
    """What runs beside the core and stands on its door (each takes a :class:`fairpod.server.core.api.Core`), so
    the core does not import it: the composition root builds it (``fairpod.server.runtime.wiring.control_plane``)."""

    eta: Any  # fairpod.server.accounting.eta.Estimates: estimated starts, its own thread (started and stopped with the loop)
    usage: Any  # fairpod.server.accounting.usage.UsageSampler: usage history and cycle timings (a keeper after each turn)
    retention: Any  # fairpod.server.keepers.retention.Retention: deletes what policy.retention_days no longer keeps


def standard_keepers(cp: Any) -> Keepers:
    """fairpod's keepers: the hours used in each budget period (rule 10, before the exits), nodes joining and
    leaving the executor's cluster (Ray; no-op otherwise), held tasks of throttled job arrays, restarts whose
    backoff ran out (:mod:`fairpod.server.core.transitions.backoff`); then the usage
    sampler, retention, the watchdog (runtime limits, hangs), the fair-share history, restarts in place that are
    due (:mod:`fairpod.server.core.transitions.restarts`), gang readiness (:mod:`fairpod.server.core.transitions.readiness`) and log rules
    (:mod:`fairpod.server.core.transitions.logrules`: the control plane's ``logwatch``, whose reader thread matches off the lock)."""
    return Keepers(before=[cp.budgets.apply, membership.sync, array_holds.release, backoff.release],
                   after=[cp.usage.tick, cp.retention.tick, cp.watchdog.tick, cp.history.tick,
                          restarts.launch_due, Readiness().tick, cp.logwatch.tick])


class Turning(CoreState, Protocol):
    """The core's state as the loop sees it: the state, and what paces, counts and runs beside its turns."""

    pace: TurnPace
    turns: TurnHistogram
    keepers: Keepers
    published: Published
    logwatch: Any  # fairpod.server.core.transitions.logrules.LogWatch (it imports the state)
    _stop: threading.Event
    _thread: threading.Thread | None

    def reconcile_once(self) -> None: ...

    def _reconcile_turn(self) -> None: ...

    def _take_exits(self, exits: list[ReplicaExit]) -> None: ...


class Loop:
    """The part of :class:`fairpod.server.core.ControlPlane` that turns; its methods take the core's state as
    their ``self`` (:class:`Turning`)."""

    _thread: threading.Thread | None  # the loop's thread, once started

    def reconcile_once(self: Turning) -> None:
        t_turn = self.pace.clock()
        self._reconcile_turn()
        t_end = self.pace.clock()
        self.pace.ran(t_turn, t_end)
        self.turns.observe(t_end - t_turn)

    def _reconcile_turn(self: Turning) -> None:
        with self._turn(), self.store.batch():  # a cycle's job updates and events: one transaction per flush
            for keep in self.keepers.before:  # budgets, node membership, held array tasks (standard_keepers)
                keep(self)
            exits = self.executor.poll(ack=False)
            if exits:  # a node lost with these exits (Ray: its agent died) is a fault before they are taken
                membership.sync(self)
            self._take_exits(exits)
            t0 = time.perf_counter()
            self.snap.now = self.clock()
            decisions = net_changes(schedule(self.snap))  # a job admitted and taken back in one cycle never ran
            self.cycle_seconds = time.perf_counter() - t0
            self.cycles += 1
            # replicas that ended while the engine decided: a job that finished is not preempted
            late = self.executor.poll(ack=False)
            self._take_exits(late)
            self.store.prefetch(d.job for d in decisions)
            for d in decisions:
                if isinstance(d, Preempt):
                    admit.preempt(self, d)
                elif isinstance(d, Shrink):
                    resize.shrink(self, d)
            for d in decisions:
                if isinstance(d, Admit):
                    admit.admit(self, d)
                elif isinstance(d, Grow):
                    resize.grow(self, d)
                elif isinstance(d, Wait):
                    self.store.update_job(from_engine(d.job), {"reason": admit.wait_reason(self, d)})
            ready = launch.ready(self)  # slots of the attempts that can start now, stored before they start
            grown = resize.grow_ready(self)  # and of the new replicas of elastic jobs that grew
            self.store.flush()  # one commit: the exits' effects, the decisions, the slots
            taken = {(e.job, e.attempt, e.rank): e for e in [*exits, *late]}  # late repeats what exits had
            self.executor.ack(list(taken.values()))  # only now: a crash before the commit re-delivers them
            resize.launch_grown(self, grown)  # new replicas of running attempts: under the lock, as before
            for keep in self.keepers.after:  # usage, retention, the watchdog, fair-share history
                keep(self)
            starts = launch.reserve_launches(self, ready)
            self.store.flush()  # the keepers' writes: what is published next is committed
            self.published.refresh(self.snap, AsOf(self.cycles, self.clock()))  # what reads answer with next
            self.publish_facts()  # and the facts of single jobs and nodes (core.facts)
        launch.launch_unlocked(self, starts)  # forking takes milliseconds per replica: not under the lock

    def _take_exits(self: Turning, exits: list[ReplicaExit]) -> None:
        self.store.prefetch(job_id_of(e.job) for e in exits)  # one query for all the jobs involved
        for e in exits:
            exit.exit(self, e)

    def start(self: Turning, interval: float = 0.25) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                self.wake.wait(interval)
                if self.pace.wait(self._stop):  # a burst of wakes: one turn for all of it (server.core.turns.TurnPace)
                    break
                self.wake.clear()
                if not outage.recheck(self, self.reload):  # the database is out: no turn until it answers
                    continue
                try:
                    diskfull.recheck(self)
                    self.reconcile_once()
                except Exception as e:  # keep serving; the next turn starts again from the store's truth
                    # a full disk and a lost database are logged once, and retried
                    if outage.failed(self, e):
                        continue  # the memory is rebuilt once the store answers again
                    if not diskfull.failed(self, e):
                        log.exception("reconcile failed; rebuilding the control plane's memory from the store")
                    try:
                        self.reload()
                    except Exception as e2:  # noqa: BLE001 - the loop must live on: the next turn tries again
                        if not diskfull.failed(self, e2) and not outage.failed(self, e2):
                            log.exception("reload failed; trying again at the next turn")

        self._thread = thread = threading.Thread(target=loop, name="fairpod-reconcile", daemon=True)
        thread.start()
        self.eta.start(self)

    def stop(self: Turning) -> None:
        self._stop.set()
        self.wake.set()
        self.eta.stop()
        self.logwatch.close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:
            self.history.tick(self, force=True)
        self.executor.close()
