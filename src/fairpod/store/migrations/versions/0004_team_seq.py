"""List a team's newest jobs without sorting all of them: an index on (team, seq).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_team_seq", "jobs", ["team", "seq"])


def downgrade() -> None:
    op.drop_index("ix_jobs_team_seq", "jobs")
