"""A job array's id and throttle are columns of its tasks (``jobs.array_id``, ``jobs.array_limit``), not read
back from each task's env (``FAIRPOD_ARRAY_JOB_ID``, ``FAIRPOD_ARRAY_TASK_LIMIT``) wherever they are needed. The
tasks of existing arrays get them from their env.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _int(v: object) -> int | None:
    try:
        return int(str(v))
    except ValueError:
        return None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("array_id", sa.Integer(), nullable=True))
        b.add_column(sa.Column("array_limit", sa.Integer(), nullable=True))
    op.create_index("ix_jobs_array_id", "jobs", ["array_id"])
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, spec FROM jobs WHERE CAST(spec AS TEXT) LIKE '%FAIRPOD_ARRAY_JOB_ID%'")).all()
    for jid, spec in rows:
        env = (json.loads(spec) if isinstance(spec, str) else spec or {}).get("env") or {}
        aid = _int(env.get("FAIRPOD_ARRAY_JOB_ID"))
        if aid is None:
            continue
        limit = _int(env["FAIRPOD_ARRAY_TASK_LIMIT"]) if "FAIRPOD_ARRAY_TASK_LIMIT" in env else None
        conn.execute(sa.text("UPDATE jobs SET array_id = :a, array_limit = :l WHERE id = :i"),
                     {"a": aid, "l": limit, "i": jid})


def downgrade() -> None:
    op.drop_index("ix_jobs_array_id", "jobs")
    with op.batch_alter_table("jobs") as b:
        b.drop_column("array_limit")
        b.drop_column("array_id")
