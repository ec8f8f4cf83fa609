"""Jobs the core did not write: with ``fairpod up --api-workers N`` the API workers commit submits themselves
(:mod:`fairpod.server.core.worker`), and so does ``fairpod api`` on other hosts against a PostgreSQL database
(:mod:`fairpod.server.runtime.apiserver`); the core takes them into the engine's queue at the start of its next
turn.

The store gives each job a ``seq`` from a counter in its insert's transaction, so a job committed later has a
larger one (SQLite has one writer; on PostgreSQL the counter's row orders the writers). :class:`Foreign` keeps the
largest ``seq`` it has read, read before the memory was built, and each turn reads the jobs above it (one range of
the ``(team, seq)`` index per team: what was committed since, nothing more). A job the core knows already (its own
submits, in the engine's queue since their commit), an array's task (workers forward arrays to the core) or a job
no longer pending is passed over; a new pending job joins the engine's queue as the core's own submits do after
their commit, its workload built from the engine's fields of its row (``Store.engine_jobs``, as a restart builds
the memory; the same workload as from the whole job, ``tests/store/test_engine_jobs.py``), not from the job read
back whole: decoding each job's spec and building its record was most of what taking it in cost. A worker's commit wakes the loop; a missed wake delays the job to the next periodic turn.
"""

from __future__ import annotations

from typing import Any

from fairpod.model.jobs import JobState
from fairpod.server.runs import to_engine

PAGE = 5000  # jobs read per turn at most; more wake the loop for another turn


class Foreign:
    """The keeper (before the exits of each turn) that takes in the jobs API workers committed."""

    def __init__(self, seq: int) -> None:
        self.seq = seq  # the largest seq read (or known when the memory was built)
        self.taken = 0  # jobs taken in so far

    def take(self, cp: Any) -> None:
        rows = cp.store.seqs_after(self.seq, list(cp.snap.teams), PAGE)  # narrow: most are known already
        new: list[int] = []
        for jid, seq, state, array_id in rows:
            self.seq = max(self.seq, seq)
            wid = to_engine(jid)
            if (state != JobState.PENDING or array_id is not None or wid in cp.snap.pending
                    or wid in cp.snap.running or jid in cp.restart_holds):
                continue
            new.append(jid)
        for job in cp.store.engine_jobs(new) if new else ():  # in seq order: the engine's fields, not whole jobs
            if job.state == JobState.PENDING:  # still pending when read again
                cp.snap.add_pending(cp.workload(job))
                self.taken += 1
        if len(rows) == PAGE:
            cp.wake.set()


__all__ = ["Foreign"]
