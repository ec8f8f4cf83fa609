"""Retention (``policy.retention_days``): indexes to find finished jobs and old events by
time (the audit log is kept whole).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_finished_at", "jobs", ["finished_at"])
    op.create_index("ix_events_ts", "events", ["ts"])


def downgrade() -> None:
    op.drop_index("ix_events_ts", "events")
    op.drop_index("ix_jobs_finished_at", "jobs")
