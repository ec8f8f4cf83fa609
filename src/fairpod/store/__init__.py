"""Persistence for the fairpod control plane (SQLAlchemy 2; SQLite by default, PostgreSQL by URL).

    store = Store("sqlite:////var/lib/fairpod/fairpod.db")
    store.create_all()
    job = store.insert_job(spec, resolve_job(spec, cluster_spec))
    with store.tx() as t:                       # several operations, one transaction
        t.update_job(job.id, {"state": JobState.RUNNING}, expect_state=JobState.PENDING)
        t.append_event("JobAdmitted", "admitted", job_id=job.id, team=job.team)

Every method returns plain frozen dataclasses (``fairpod.store.records``), never ORM objects.
"""

from fairpod.store.auth import TOKEN_PREFIX, hash_token
from fairpod.store.core import Store, Tx
from fairpod.store.records import (
    AlreadyExists,
    AuditEntry,
    Conflict,
    Event,
    Job,
    Node,
    NotFound,
    SpecRecord,
    SpecVersion,
    StoreError,
    TokenInfo,
    Unreachable,
    User,
)

__all__ = [
    "TOKEN_PREFIX",
    "AlreadyExists",
    "AuditEntry",
    "Conflict",
    "Event",
    "Job",
    "Node",
    "NotFound",
    "SpecRecord",
    "SpecVersion",
    "Store",
    "StoreError",
    "TokenInfo",
    "Tx",
    "Unreachable",
    "User",
    "hash_token",
]
