"""The lease of standby control planes on a real PostgreSQL (fairpod.store.lease): election, renewal,
takeover after expiry, and the fence on write transactions."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from fairpod.model.spec import seed_spec
from fairpod.store import Store, lease
from fairpod.store.lease import Fenced

from .conftest import pg_url, wipe  # noqa: F401


@pytest.fixture
def stores(pg_url: str) -> Iterator[tuple[Store, Store]]:  # noqa: F811
    a, b = Store(pg_url), Store(pg_url)
    wipe(a.engine)
    a.create_all()
    a.put_spec(seed_spec(), actor="test")
    yield a, b
    a.close()
    b.close()


def _acquire(store: Store, node: str, epoch: int | None, duration: float) -> lease.Lease:
    with store.engine.begin() as conn:
        return lease.acquire(conn, node, f"http://{node}", epoch, duration)


def _fence(store: Store, node: str, epoch: int) -> None:
    store.fence = lambda s: lease.check_fence(s, node, epoch)


def test_one_leads_until_its_lease_expires_then_the_other_takes_over(stores: tuple[Store, Store]):
    a, b = stores
    got = _acquire(a, "a", None, 0.6)
    assert (got.holder, got.epoch) == ("a", 1)
    assert _acquire(b, "b", None, 0.6).holder == "a"  # held: b stands by
    assert _acquire(a, "a", 1, 0.6).epoch == 1  # renewed, same epoch
    deadline = time.monotonic() + 10
    while (got := _acquire(b, "b", None, 0.6)).holder != "b":
        assert time.monotonic() < deadline, "b never took the expired lease"
        time.sleep(0.05)
    assert got.epoch == 2
    assert _acquire(a, "a", 1, 0.6).holder == "b"  # a's renewal finds b: it must step down


def test_a_fenced_write_is_refused_and_leaves_nothing(stores: tuple[Store, Store]):
    a, b = stores
    _acquire(a, "a", None, 0.3)
    _fence(a, "a", 1)
    a.append_event("Before", "written while a leads")
    time.sleep(0.4)
    assert _acquire(b, "b", None, 5).epoch == 2
    with pytest.raises(Fenced, match="b holds epoch 2"):
        a.append_event("After", "a write of the old leader")
    with pytest.raises(Fenced):
        with a.tx() as t:
            t.append_event("AfterTx", "in a transaction")
    kinds = [e.kind for e in b.list_events(limit=100)]
    assert "Before" in kinds and "After" not in kinds and "AfterTx" not in kinds
    _fence(b, "b", 2)
    b.append_event("New", "the new leader writes")


def test_a_takeover_waits_for_a_write_that_passed_the_fence(stores: tuple[Store, Store]):
    """A write transaction that passed the check holds the lease row (FOR SHARE): the takeover commits after
    it, so the write is either in the store the new leader reads, or refused."""
    a, b = stores
    _acquire(a, "a", None, 0.2)
    _fence(a, "a", 1)
    time.sleep(0.3)  # expired, but nobody took it yet: a's writes still pass
    inside, took = threading.Event(), threading.Event()
    order: list[str] = []

    def takeover() -> None:
        inside.wait(10)
        _acquire(b, "b", None, 5)
        order.append("takeover")
        took.set()

    t = threading.Thread(target=takeover)
    t.start()
    with a.tx() as tx:
        tx.append_event("Late", "passed the fence before the takeover")
        inside.set()
        assert not took.wait(0.5)  # the takeover waits for this transaction
        order.append("write")
    t.join(10)
    assert order == ["write", "takeover"]
    with b.engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM events WHERE kind = 'Late'")).scalar_one() == 1
