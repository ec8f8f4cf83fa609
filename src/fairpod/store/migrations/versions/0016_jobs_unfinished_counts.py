"""An index of the unfinished jobs by state and team, with their preemptions: the dashboard's task overview counts
the unfinished jobs per state and team (fairpod.server.core.task_index.unfinished_counts) from it alone, without
reading a job's row (at datacenter size 140,000 rows of ~1 KB each, read at every poll of the page).

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

ACTIVE = "state NOT IN ('Succeeded', 'Failed', 'Cancelled')"


def upgrade() -> None:
    op.create_index("ix_jobs_unfinished_state_team", "jobs", ["state", "team", "preemptions"],
                    sqlite_where=sa.text(ACTIVE), postgresql_where=sa.text(ACTIVE))


def downgrade() -> None:
    op.drop_index("ix_jobs_unfinished_state_team", "jobs")
