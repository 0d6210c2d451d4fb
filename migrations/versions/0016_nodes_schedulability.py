"""nodes.unschedulable and nodes.taints: whether a node is cordoned, and its taints

Revision ID: 0020
Revises: 0015
Create Date: 2026-12-04 18:00:00

From the Node's spec, as the cluster watcher reads it, beside the capacity, allocatable,
labels and conditions it stores already; empty while the service does not read the cluster.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("unschedulable", sa.Boolean(), nullable=True))
    op.add_column("nodes", sa.Column("taints", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE nodes DROP COLUMN taints")
    op.execute("ALTER TABLE nodes DROP COLUMN unschedulable")
