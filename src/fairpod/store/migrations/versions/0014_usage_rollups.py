"""Usage rollups: each series' figures summed per time bucket of 30 s, 150 s, 600 s and an hour
(fairpod.server.accounting.rollups), so the dashboard's trends, the usage report and the budgets read a bucket per series
instead of every sample (a busy cluster of 500 teams writes ~900,000 sample rows an hour); and an index on the
samples' time alone (the readers ask a time range of every kind).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

FIGURES = ("acc", "vcpu", "memory_gib", "cap_acc", "cap_vcpu", "cap_memory_gib", "borrowed", "lent", "nodes",
           "healthy_nodes")  # fmt: skip


def upgrade() -> None:
    op.create_table(
        "usage_rollups",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("res", sa.Integer(), nullable=False),
        sa.Column("t0", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("covered", sa.Float(), nullable=False),
        *(sa.Column(f, sa.Float(), nullable=False) for f in FIGURES),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_rollup_res_t0", "usage_rollups", ["res", "t0"])
    op.create_index("ix_usage_ts", "usage_samples", ["ts"])


def downgrade() -> None:
    op.drop_index("ix_usage_ts", "usage_samples")
    op.drop_index("ix_rollup_res_t0", "usage_rollups")
    op.drop_table("usage_rollups")
