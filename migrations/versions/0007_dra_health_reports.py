"""dra_health_reports: the latest state of each device from its driver's DRA health stream

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 14:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "dra_health_reports",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("driver", sa.String(length=253), nullable=False),
        sa.Column("pool", sa.String(length=253), nullable=False),
        sa.Column("device", sa.String(length=253), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("health", sa.String(length=32), nullable=False),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("timeout_seconds", sa.BigInteger(), nullable=True),
        sa.Column("message", sa.String(length=1024), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dra_health_reports")),
        sa.UniqueConstraint(
            "driver", "pool", "device", name=op.f("uq_dra_health_reports_driver_pool_device")
        ),
    )


def downgrade() -> None:
    op.drop_table("dra_health_reports")
