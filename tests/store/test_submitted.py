"""A submit group's Idempotency-Keys (``fairpod.store.submitted``): looked up in one statement, recorded in one,
on SQLite here and on PostgreSQL in test_store_postgres.py."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from fairpod.model.spec import ClusterSpec
from fairpod.store import Store

from .helpers import submit


def test_a_groups_keys_are_looked_up_and_recorded_together(store: Store, cluster: ClusterSpec):
    a, b, c = (submit(store, cluster, n) for n in ("a", "b", "c"))
    assert store.submitted_with_keys([]) == {}
    with store.tx() as t:
        t.remember_submits([("john", "k1", a.id), ("smith", "k1", b.id), ("john", "k 2/ü", c.id)])
    assert store.submitted_with("smith", "k1") == b.id  # as the one-key lookup reads them
    pairs = [("john", "k1"), ("john", "k1"), ("smith", "k1"), ("john", "k 2/ü"), ("john", "never"), ("eve", "k1")]
    assert store.submitted_with_keys(pairs) == {("john", "k1"): a.id, ("smith", "k1"): b.id, ("john", "k 2/ü"): c.id}
    many = [("john", f"n{i}") for i in range(1200)] + [("smith", "k1")]  # more than one statement's parameters
    assert store.submitted_with_keys(many) == {("smith", "k1"): b.id}
    with pytest.raises(IntegrityError), store.tx() as t:  # a key is recorded once: the transaction fails whole
        t.remember_submits([("eve", "k9", a.id), ("john", "k1", c.id)])
    assert store.submitted_with_keys([("eve", "k9"), ("john", "k1")]) == {("john", "k1"): a.id}
