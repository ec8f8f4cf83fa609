"""Round trips of the cluster spec, meta, nodes, events, users and audit tables."""

from __future__ import annotations

import pytest

from fairpod.model.nodes import DeepHealthCheck, NodeHealth
from fairpod.model.spec import ClusterSpec, parse_spec
from fairpod.model.users import Role
from fairpod.store import (
    AlreadyExists,
    Conflict,
    Node,
    NotFound,
    Store,
    StoreError,
)

from .helpers import submit


def test_create_all_is_idempotent_and_records_the_schema_revision(db_url: str):
    from sqlalchemy import text

    from fairpod.store.schema import HEAD

    a = Store(db_url)
    a.create_all()
    a.create_all()
    b = Store(db_url)  # a second process/engine on the same file
    b.create_all()
    with b.engine.begin() as c:
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
        c.execute(text("UPDATE alembic_version SET version_num = '999'"))
    with pytest.raises(StoreError, match="schema revision 999"):
        a.create_all()


def test_spec_round_trip_and_versions(store: Store, cluster: ClusterSpec):
    assert store.get_spec() is None
    assert store.spec_version() == 0
    r1 = store.put_spec(cluster, now=10.0)
    assert (r1.version, r1.updated_at) == (1, 10.0)
    got = store.get_spec()
    assert got is not None and got.spec == cluster and got.version == 1
    data = cluster.model_dump(mode="json")
    data["teams"][0]["fair_share_weight"] = 7
    r2 = store.put_spec(parse_spec(data), expected_version=1)
    assert r2.version == 2 and store.spec_version() == 2
    got = store.get_spec()
    assert got is not None and got.spec.teams[0].fair_share_weight == 7
    with pytest.raises(Conflict):
        store.put_spec(cluster, expected_version=1)
    assert store.spec_version() == 2
    with pytest.raises(TypeError):
        store.put_spec(data)  # type: ignore[arg-type]


def test_meta(store: Store):
    assert store.get_meta("x") is None
    store.set_meta("x", "1")
    store.set_meta("x", "2")
    assert store.get_meta("x") == "2"
    assert store.delete_meta("x") and not store.delete_meta("x")


def test_nodes_crud(store: Store):
    n = store.add_node("w-0", "workers", "ml.g5.12xlarge", labels={"rack": "a"}, now=5.0)
    assert n == Node("w-0", "workers", "ml.g5.12xlarge", labels={"rack": "a"}, created_at=5.0)
    assert n.schedulable
    store.add_node("w-1", "workers", "ml.g5.12xlarge")
    store.add_node("p-0", "big", "ml.p5.48xlarge", health_status="Unschedulable")
    with pytest.raises(AlreadyExists):
        store.add_node("w-0", "workers", "ml.g5.12xlarge")
    assert store.get_node("w-0") == n
    assert store.get_node("nope") is None

    u = store.update_node(
        "w-1",
        {"health_status": NodeHealth.PENDING_REBOOT, "deep_health_check": "InProgress", "cordoned": True,
         "fault_type": "GpuXid", "fault_reason": "Xid 79", "last_check_at": 12.5},
    )  # fmt: skip
    assert u.health_status is NodeHealth.PENDING_REBOOT and u.deep_health_check is DeepHealthCheck.IN_PROGRESS
    assert (u.cordoned, u.fault_type, u.fault_reason, u.last_check_at) == (True, "GpuXid", "Xid 79", 12.5)
    assert not u.schedulable
    assert store.get_node("w-1") == u

    assert [x.name for x in store.list_nodes()] == ["p-0", "w-0", "w-1"]
    # the list reads the labels as text and the enums from a table: the same records as one node's read
    assert store.list_nodes() == [store.get_node(x) for x in ("p-0", "w-0", "w-1")]
    assert [x.name for x in store.list_nodes(instance_group="workers")] == ["w-0", "w-1"]
    assert [x.name for x in store.list_nodes(instance_type=["ml.p5.48xlarge"])] == ["p-0"]
    assert [x.name for x in store.list_nodes(health_status=NodeHealth.SCHEDULABLE)] == ["w-0"]

    for bad in ({"health_status": "Sick"}, {"cordoned": "yes"}, {"name": "x"}, {"labels": [1]}):
        with pytest.raises(ValueError):
            store.update_node("w-0", bad)
    assert store.get_node("w-0") == n
    with pytest.raises(NotFound):
        store.update_node("nope", {"cordoned": True})
    assert store.delete_node("p-0") and not store.delete_node("p-0")
    assert [x.name for x in store.list_nodes()] == ["w-0", "w-1"]


def test_events_append_and_filters(store: Store, cluster: ClusterSpec):
    job = submit(store, cluster, "a")
    e1 = store.append_event("JobSubmitted", "submitted", job_id=job.id, team="john", data={"n": 1}, ts=1.0)
    e2 = store.append_event("NodeFault", "xid", node="w-0", data={"xid": 79})
    e3 = store.append_event("JobAdmitted", "go", job_id=job.id, team="john")
    assert e1.id < e2.id < e3.id
    assert (e1.ts, e1.kind, e1.job_id, e1.team, e1.message, e1.data) == (
        1.0,
        "JobSubmitted",
        job.id,
        "john",
        "submitted",
        {"n": 1},
    )
    assert store.list_events() == [e1, e2, e3]
    assert store.list_events(job_id=job.id) == [e1, e3]
    assert store.list_events(team="john") == [e1, e3]
    assert store.list_events(node="w-0") == [e2]
    assert store.list_events(kind=["NodeFault", "JobAdmitted"]) == [e2, e3]
    assert store.list_events(since_id=e1.id) == [e2, e3]
    assert store.list_events(since_id=e3.id) == []
    assert store.list_events(limit=2) == [e1, e2]
    assert store.list_events(limit=1, descending=True) == [e3]
    assert store.last_event_id() == e3.id
    with pytest.raises(NotFound):  # a job id that does not exist
        store.append_event("JobFailed", job_id=9999)
    with pytest.raises(ValueError):
        store.append_event("X", data={"f": float("nan")})
    assert store.list_events() == [e1, e2, e3]


def test_users_crud(store: Store):
    u = store.create_user("alice", Role.ADMIN, now=3.0)
    assert (u.name, u.role, u.teams, u.created_at) == ("alice", Role.ADMIN, [], 3.0)
    store.create_user("bob", "member", ["john", "smith"])
    with pytest.raises(AlreadyExists):
        store.create_user("bob")
    with pytest.raises(ValueError):
        store.create_user("carol", "superuser")
    with pytest.raises(ValueError):
        store.create_user("carol", "member", [1])  # type: ignore[list-item]
    assert [x.name for x in store.list_users()] == ["alice", "bob"]
    got = store.get_user("bob")
    assert got is not None and got.role is Role.MEMBER and got.teams == ["john", "smith"]
    v = store.update_user("bob", {"role": Role.VIEWER, "teams": ["smith"]})
    assert (v.role, v.teams) == (Role.VIEWER, ["smith"])
    with pytest.raises(ValueError):
        store.update_user("bob", {"name": "robert"})
    with pytest.raises(NotFound):
        store.update_user("zed", {"role": "admin"})
    assert store.delete_user("bob") and not store.delete_user("bob")
    assert store.get_user("bob") is None


def test_audit(store: Store):
    a1 = store.append_audit("alice", "spec.put", "cluster", {"version": 2}, ts=1.0)
    a2 = store.append_audit("bob", "job.cancel", "john/a")
    a3 = store.append_audit("alice", "user.create", "bob", {"role": "member"})
    assert (a1.ts, a1.actor, a1.action, a1.target, a1.detail) == (
        1.0,
        "alice",
        "spec.put",
        "cluster",
        {"version": 2},
    )
    assert store.list_audit() == [a1, a2, a3]
    assert store.list_audit(actor="alice") == [a1, a3]
    assert store.list_audit(action="job.cancel") == [a2]
    assert store.list_audit(target="bob") == [a3]
    assert store.list_audit(since_id=a2.id) == [a3]
    assert store.list_audit(limit=2, descending=True) == [a3, a2]
