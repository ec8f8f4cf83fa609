"""Crashes of the API processes on PostgreSQL: ``fairpod up --api-workers 2 --db postgresql://…`` (one live server
for the module, on a real PostgreSQL server the module starts: tests/store/conftest.py) and ``fairpod api`` beside
it. kill -9 of a worker, of the core, of both, of ``fairpod api``, while 20 clients submit with their
Idempotency-Keys as the CLI does (tests/server/runtime/test_api_workers.py's ``Storm``, which checks the same on
SQLite): every job answered 2xx is there once with the id it was answered, Succeeded, its replica ran once. And a
worker killed -9 inside its group commit's write transaction, after its first insert: another connection holds
the events' advisory lock, so the group waits there (seen in ``pg_locks``) until the worker is dead. After every
crash no submit is half written: no job without its ``JobSubmitted`` event or audit entry, no such event, entry
or idempotency key without its job."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.pool import NullPool

from fairpod.store.events import EVENT_LOCK_KEY
from fairpod.store.tables import AuditRow, EventRow, JobRow, SubmitKeyRow
from tests.store.conftest import pg_url, wipe  # noqa: F401  (the fixture: a real PostgreSQL server)

from ..conftest import Server, wait_for
from .test_api_remote import ApiProcess, workers_on_postgres
from .test_api_workers import Storm, gone, kill_amid_a_submit, pids, restart_core


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[Server]:  # noqa: F811
    yield from workers_on_postgres(tmp_path_factory.mktemp("pg-workers"), pg_url, 2)


def half_written(url: str) -> dict[str, list[Any]]:
    """What a submit's transaction writes together (``write_submits``: the job, its ``JobSubmitted`` event, its
    audit entry, its idempotency key) found apart in the database: each list should be empty."""
    eng = create_engine(url, poolclass=NullPool)
    try:
        with eng.connect() as c:
            jobs = set(c.execute(select(JobRow.id)).scalars())
            events = Counter(c.execute(select(EventRow.job_id).where(EventRow.kind == "JobSubmitted")).scalars())
            audits = Counter(int(d["id"]) for d in c.execute(select(AuditRow.detail).where(
                AuditRow.action == "job.submit")).scalars())
            keys = list(c.execute(select(SubmitKeyRow.job_id)).scalars())
    finally:
        eng.dispose()
    return {"job without event": sorted(jobs - set(events)), "job without audit": sorted(jobs - set(audits)),
            "event without job": sorted(set(events) - jobs), "audit without job": sorted(set(audits) - jobs),
            "key without job": sorted(set(keys) - jobs),
            "two events": sorted(j for j, n in events.items() if n > 1),
            "two audits": sorted(j for j, n in audits.items() if n > 1)}


CLEAN: dict[str, list[Any]] = {k: [] for k in ("job without event", "job without audit", "event without job",
                                               "audit without job", "key without job", "two events", "two audits")}


def test_kill_9_of_a_worker_while_clients_submit(srv: Server, tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    _, _, before = pids(srv)
    with Storm(srv, "pa", tmp_path / "marks" / "ran") as storm:
        victim = kill_amid_a_submit(srv, before)
    storm.check()
    assert half_written(pg_url) == CLEAN
    wait_for(lambda: pids(srv)[2].get(victim) not in (None, before[victim]), 30, f"worker {victim} to be started again")
    assert pids(srv)[2][1 - victim] == before[1 - victim]  # the other worker served on


def test_kill_9_of_the_core_while_clients_submit(srv: Server, tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    with Storm(srv, "pb", tmp_path / "marks" / "ran") as storm:
        restart_core(srv)
    storm.check()
    assert half_written(pg_url) == CLEAN


def test_kill_9_of_a_worker_and_the_core_while_clients_submit(srv: Server, tmp_path: Path,
                                                              pg_url: str) -> None:  # noqa: F811
    with Storm(srv, "pc", tmp_path / "marks" / "ran") as storm:
        restart_core(srv, worker=1)
    storm.check()
    assert half_written(pg_url) == CLEAN


def test_kill_9_of_fairpod_api_while_clients_submit_through_it(srv: Server, tmp_path: Path,
                                                               pg_url: str) -> None:  # noqa: F811
    """``fairpod api`` (the API process for another host) killed -9 among its clients' submits and started again on
    its address (as its supervisor would): the clients' retries with their keys get each job once."""
    api = ApiProcess(tmp_path, srv, pg_url)
    try:
        first = api.proc.pid
        with Storm(srv, "pd", tmp_path / "marks" / "ran", url=api.url) as storm:
            api.proc.send_signal(signal.SIGKILL)
            api.proc.wait(30)
            api.start()
        storm.check()
        assert api.proc.pid != first
    finally:
        api.stop()
    assert half_written(pg_url) == CLEAN


# -- a worker killed -9 inside its group commit ----------------------------------------------------------------------

def holders(url: str, names: list[str]) -> dict[int, dict[str, Any]]:
    """The backends that hold the submits' ``name:<team>:<name>`` locks (``Store.serialize``, taken first in
    ``write_submits``' transaction): pid -> the names it holds, whether it has written (a transaction id is
    given at the first write), what it waits for."""
    q = text("""
        SELECT l.pid, n.name, a.backend_xid IS NOT NULL AS wrote, a.wait_event_type, a.wait_event,
               (SELECT w.objid::bigint FROM pg_locks w WHERE w.pid = l.pid AND NOT w.granted
                AND w.locktype = 'advisory') AS waits_on
        FROM pg_locks l
        JOIN unnest(CAST(:names AS text[])) AS n(name)
          ON l.classid::bigint = (hashtextextended(n.name, 0) >> 32) & 4294967295
         AND l.objid::bigint = hashtextextended(n.name, 0) & 4294967295
        JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1""")
    eng = create_engine(url, poolclass=NullPool)
    try:
        with eng.connect() as c:
            rows = c.execute(q, {"names": names}).all()
    finally:
        eng.dispose()
    out: dict[int, dict[str, Any]] = {}
    for pid, name, wrote, wtype, wevent, waits_on in rows:
        b = out.setdefault(pid, {"names": [], "wrote": wrote, "waits": (wtype, wevent, waits_on)})
        b["names"].append(name)
    return out


def backend_alive(url: str, pid: int) -> bool:
    eng = create_engine(url, poolclass=NullPool)
    try:
        with eng.connect() as c:
            return bool(c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid}).scalar())
    finally:
        eng.dispose()


def test_a_worker_killed_inside_its_group_commit_leaves_no_half_written_submit(srv: Server, tmp_path: Path,
                                                                              pg_url: str) -> None:  # noqa: F811
    """Another connection holds the events' advisory lock (``store.events.serialize_appends``): worker 0's group of
    submits inserts its first job, then waits for that lock inside its write transaction (its backend holds the
    group's name locks, has a transaction id, waits on that advisory lock: ``pg_locks``). kill -9 of the worker
    then; the lock let go, its backend ends without a commit. The clients' retries with their keys (on the worker
    the core started again) get each job once, and the core admits and runs them once."""
    _, _, workers = pids(srv)
    victim, other = workers[0], workers[1]
    storm = Storm(srv, "pg-group", tmp_path / "marks" / "ran", threads=4, each=1)
    names = [f"name:john:pg-group-{i}-0" for i in range(4)]
    hold = create_engine(pg_url, poolclass=NullPool)
    stopped = False
    try:
        with hold.connect() as lock:
            lock.execute(text("SELECT pg_advisory_lock(:k)"), {"k": EVENT_LOCK_KEY})
            lock.commit()  # (a session's lock: held across its transactions until unlocked)
            os.kill(other, signal.SIGSTOP)  # only worker 0 accepts the clients' connections
            stopped = True
            storm.start()
            # (only worker 0 runs, and its one writer: at most one backend holds these names now)
            [(backend, group)] = wait_for(
                lambda: [(pid, b) for pid, b in holders(pg_url, names).items()
                         if b["wrote"] and b["waits"] == ("Lock", "advisory", EVENT_LOCK_KEY)],
                60, "worker 0's group to wait for the events' lock after its first insert")
            print(f"the group in the transaction: {sorted(group['names'])}")
            os.kill(victim, signal.SIGKILL)
            wait_for(lambda: gone(victim), 30, "worker 0 to end")
            assert backend_alive(pg_url, backend)  # still waiting, its transaction open: nothing committed
            lock.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": EVENT_LOCK_KEY})
            lock.commit()
        wait_for(lambda: not backend_alive(pg_url, backend), 30, "the dead worker's backend to end")
        os.kill(other, signal.SIGCONT)
        stopped = False
        storm.__exit__(None)
    finally:
        if stopped:
            os.kill(other, signal.SIGCONT)
        hold.dispose()
    assert half_written(pg_url) == CLEAN
    storm.check()  # each job once, with the id its client was answered, Succeeded, its replica ran once
    wait_for(lambda: pids(srv)[2].get(0) not in (None, victim), 30, "worker 0 to be started again")
