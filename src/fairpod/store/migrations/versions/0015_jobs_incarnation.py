"""``jobs.incarnation``: a random value per job, stored with it, that its job tokens are signed over
(fairpod.server.access.jobtoken). A job id is not unique across timelines: a restore of a backup takes the id counter
back, and the next job gets the id of a job of the discarded timeline; that job's token must not be good for it.
Jobs stored before this revision have none (their tokens, signed over the id alone, keep working).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("incarnation", sa.String(32), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "incarnation")
