"""``jobs.exit_info`` is named ``run_state``: it holds what the control plane keeps of a job's live attempt (its
slots, the replicas' exits, a stop under way), not only exit information.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE jobs RENAME COLUMN exit_info TO run_state")  # SQLite >= 3.25 and PostgreSQL


def downgrade() -> None:
    op.execute("ALTER TABLE jobs RENAME COLUMN run_state TO exit_info")
