"""server.ha.leader on a real PostgreSQL: the elector's steps, its fences, and a leader stopped inside a write
transaction (the database ends that transaction, so a standby can take over)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from fairpod.executors.base import ExecutorError
from fairpod.model.spec import seed_spec
from fairpod.server.ha.leader import NO_FENCE_ENV, Elector, FencedExecutor, HaSettings
from fairpod.store import Store
from tests.store.conftest import pg_url, wipe  # noqa: F401

from ..ha_cluster import wait_for

FAST = HaSettings(lease=1.0, renew=0.25, poll=0.25)


@pytest.fixture
def url(pg_url: str) -> Iterator[str]:  # noqa: F811
    s = Store(pg_url)
    wipe(s.engine)
    with s.engine.begin() as c:
        c.execute(text("DROP TABLE IF EXISTS ha_lease, ha_members"))
    s.create_all()
    s.put_spec(seed_spec(), actor="test")
    s.close()
    yield pg_url


def test_a_leader_stopped_inside_a_transaction_does_not_keep_the_standby_out(url: str):
    a, b = Elector(url, "a", "http://a", FAST), Elector(url, "b", "http://b", FAST)
    a.on_step_down = lambda why: None
    a.step()
    assert a.holds() and a.epoch == 1
    store = Store(url)
    a.guard(store)
    try:
        with pytest.raises(DBAPIError, match="idle-in-transaction|terminat|closed"), store.tx() as t:
            t.append_event("Stuck", "written by a leader that stops here, with the lease row locked")
            wait_for(lambda: (b.step(), b.epoch)[1] is not None, 20, "the standby to take over", step=0.25)
            assert b.epoch == 2
            t.append_event("Late", "after the takeover")  # its session was ended: nothing of it commits
    finally:
        store.close()
    with b.engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM events WHERE kind IN ('Stuck', 'Late')")).scalar_one() == 0
    b.stop(release=True)
    a.stop(release=False)


def test_a_leader_stopped_inside_its_renewal_does_not_keep_the_standby_out(url: str):
    """The elector's own pool too: a leader stopped (SIGSTOP) between its renewal's ``FOR UPDATE`` of the lease row
    and its commit held that row until it was continued, and no standby could take over (CI's paused-leader test:
    "lease try failed: ... lock timeout" for 60 s)."""
    from fairpod.store import lease

    a, b = Elector(url, "a", "http://a", FAST), Elector(url, "b", "http://b", FAST)
    a.on_step_down = lambda why: None
    a.step()
    assert a.holds() and a.epoch == 1
    with pytest.raises(DBAPIError, match="idle-in-transaction|terminat|closed"), a.engine.begin() as conn:
        lease.acquire(conn, a.node, a.my_url, a.epoch, FAST.lease)  # the renewal, stopped before its commit
        wait_for(lambda: (b.step(), b.epoch)[1] is not None, 20, "the standby to take over", step=0.25)
        assert b.epoch == 2
        conn.execute(text("SELECT 1"))  # its session was ended: the renewal does not commit
    b.stop(release=True)
    a.stop(release=False)


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def launch(self, job: object) -> None:
        self.calls.append("launch")

    def restart_replicas(self, job: object) -> None:
        self.calls.append("restart_replicas")

    def running(self) -> dict[str, int]:
        return {}


def test_the_executor_acts_only_while_the_lease_holds(url: str):
    a = Elector(url, "a", "http://a", FAST)
    a.on_step_down = lambda why: None
    inner = _Recorder()
    ex = FencedExecutor(inner, a)
    with pytest.raises(ExecutorError):
        ex.launch(None)  # not elected yet
    a.step()
    ex.launch(None)
    assert inner.calls == ["launch"]
    a.valid_until = time.monotonic() - 1  # as after a pause longer than the lease
    with pytest.raises(ExecutorError, match="no longer leads"):
        ex.launch(None)
    with pytest.raises(ExecutorError, match="no longer leads"):
        ex.restart_replicas(None)  # a restart in place starts a process too
    assert inner.calls == ["launch"] and ex.running() == {}
    assert a.counters.fenced == 3
    a.stop(release=False)


def test_a_late_renewal_is_counted_and_told(url: str):
    a = Elector(url, "a", "http://a", HaSettings(lease=4.0, renew=0.25, poll=0.25))
    told: list[float] = []
    a.on_late = told.append
    a.step()
    a.step()  # on time
    assert told == [] and a.counters.renewals_late == 0
    a._last_renewal -= 1.0  # as if this renewal came a second after the previous one (twice the interval: late)
    a.step()
    assert len(told) == 1 and told[0] >= 1.0 and a.counters.renewals_late == 1
    assert "fairpod_lease_renewals_late_total 1" in a.metrics()
    a.stop(release=True)


def test_the_fault_switch_turns_the_fence_off_only_when_set(url: str, monkeypatch: pytest.MonkeyPatch):
    """FAIRPOD_TEST_FAULT_NO_FENCE=1 (fault injection for the chaos test): writes and actions of a leader whose
    lease a newer one holds go through; a renewal still makes it step down. Unset: the fence holds."""
    monkeypatch.delenv(NO_FENCE_ENV, raising=False)
    a = Elector(url, "a", "http://a", FAST)
    assert not a.unfenced
    a.on_step_down = lambda why: None
    a.step()
    a.valid_until = time.monotonic() - 1
    with pytest.raises(ExecutorError):
        a.check_action("launch")
    a.stop(release=False)
    monkeypatch.setenv(NO_FENCE_ENV, "1")
    # c's lease lasts 30 s: b's renewal below must find it held (with FAST's 1 s, a loaded machine let it expire
    # first, and b took the lease again at epoch 4)
    b, c = Elector(url, "b", "http://b", FAST), Elector(url, "c", "http://c", HaSettings(30.0, 0.25, 0.25))
    downs: list[str] = []
    b.on_step_down = downs.append
    wait_for(lambda: (b.step(), b.epoch)[1] is not None, 20, "b to take a's expired lease", step=0.25)
    assert b.unfenced and b.epoch == 2
    wait_for(lambda: (c.step(), c.epoch)[1] is not None, 20, "c to take the expired lease", step=0.25)
    store = Store(url)
    b.guard(store)
    try:
        b.check_action("launch")  # b's lease ran out and c leads: unfenced, it goes through
        store.append_event("Unfenced", "written by a leader that no longer holds the lease")
    finally:
        store.close()
    with c.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events WHERE kind = 'Unfenced'")).scalar_one() == 1
    b.step()  # its renewal finds c
    assert downs and "c holds the lease at epoch 3" in downs[0]
    b.stop(release=False)
    c.stop(release=True)
