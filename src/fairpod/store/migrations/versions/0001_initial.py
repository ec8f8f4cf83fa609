"""The schema of fairpod's first release (what ``create_all`` made as schema version 1).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Json = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
ACTIVE = "state NOT IN ('Succeeded', 'Failed', 'Cancelled')"
AUTOINC = {"sqlite_autoincrement": True}


def upgrade() -> None:
    op.create_table(
        "cluster",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("spec", Json, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "meta",
        sa.Column("key", sa.String(128), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.create_table(
        "counters",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Integer(), nullable=False),
    )
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(253), primary_key=True),
        sa.Column("instance_group", sa.String(64), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("health_status", sa.String(40), nullable=False),
        sa.Column("deep_health_check", sa.String(20), nullable=True),
        sa.Column("cordoned", sa.Boolean(), nullable=False),
        sa.Column("fault_type", sa.String(128), nullable=True),
        sa.Column("fault_reason", sa.Text(), nullable=True),
        sa.Column("last_check_at", sa.Float(), nullable=True),
        sa.Column("labels", Json, nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_nodes_instance_group", "nodes", ["instance_group"])
    op.create_index("ix_nodes_instance_type", "nodes", ["instance_type"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("team", sa.String(40), nullable=False),
        sa.Column("spec", Json, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("acc", sa.Integer(), nullable=False),
        sa.Column("mcpu", sa.Integer(), nullable=False),
        sa.Column("mib", sa.Integer(), nullable=False),
        sa.Column("submit_time", sa.Float(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False, unique=True),
        sa.Column("enqueued_at", sa.Float(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("first_started_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_retry", sa.Integer(), nullable=False),
        sa.Column("auto_resume", sa.Boolean(), nullable=False),
        sa.Column("placement", Json, nullable=False),
        sa.Column("borrowed_from", Json, nullable=False),
        sa.Column("preemptions", sa.Integer(), nullable=False),
        sa.Column("exit_info", Json, nullable=True),
        sa.Column("checkpoint_at", sa.Float(), nullable=True),
        sa.Column("checkpoint_step", sa.Integer(), nullable=True),
        sa.Column("checkpoint_path", sa.Text(), nullable=True),
        sa.Column("master_port", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        **AUTOINC,
    )
    op.create_index("ux_jobs_team_name_active", "jobs", ["team", "name"], unique=True,
                    sqlite_where=sa.text(ACTIVE), postgresql_where=sa.text(ACTIVE))
    op.create_index("ix_jobs_team_name", "jobs", ["team", "name"])
    op.create_index("ix_jobs_state_seq", "jobs", ["state", "seq"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="SET NULL"), nullable=True),
        sa.Column("node", sa.String(253), nullable=True),
        sa.Column("team", sa.String(40), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", Json, nullable=False),
        **AUTOINC,
    )
    op.create_index("ix_events_job", "events", ["job_id", "id"])
    op.create_index("ix_events_team", "events", ["team", "id"])
    op.create_index("ix_events_node", "events", ["node", "id"])
    op.create_table(
        "users",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("teams", Json, nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("user", sa.String(64), sa.ForeignKey("users.name", ondelete="CASCADE"), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.Column("last_used_at", sa.Float(), nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        **AUTOINC,
    )
    op.create_index("ix_tokens_user", "tokens", ["user"])
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("detail", Json, nullable=False),
        **AUTOINC,
    )
    op.create_index("ix_audit_actor", "audit", ["actor", "id"])
    op.create_table(
        "usage_samples",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        *(sa.Column(c, sa.Float(), nullable=False) for c in (
            "acc", "vcpu", "memory_gib", "cap_acc", "cap_vcpu", "cap_memory_gib", "borrowed", "lent")),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("healthy_nodes", sa.Integer(), nullable=False),
        **AUTOINC,
    )
    op.create_index("ix_usage_kind_ts", "usage_samples", ["kind", "ts"])


def downgrade() -> None:
    for table in ("usage_samples", "audit", "tokens", "users", "events", "jobs", "nodes", "counters", "meta",
                  "cluster"):
        op.drop_table(table)
