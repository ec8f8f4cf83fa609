"""An index on ``jobs.first_started_at``: ``/metrics`` reads the jobs admitted since its previous scrape
(fairpod.server.accounting.job_tallies) instead of every job.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_first_started_at", "jobs", ["first_started_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_first_started_at", "jobs")
