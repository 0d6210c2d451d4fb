"""devices.removed_by_capacity: derived-health devices the Node's status counts as gone

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 14:00:00

A device whose health is derived from the kubelet's lists is marked removed, while its stream
still lists it, when the Node's capacity no longer counts it; the flag tells such a device
from one its stream no longer lists, so that it comes back when capacity rises again.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "devices",
        sa.Column("removed_by_capacity", sa.Boolean(), server_default=sa.false(), nullable=False),
    )


def downgrade() -> None:
    # Not batch: rebuilding the table would drop its triggers and break the ones naming it.
    op.execute("ALTER TABLE devices DROP COLUMN removed_by_capacity")
