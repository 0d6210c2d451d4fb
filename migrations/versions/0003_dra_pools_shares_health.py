"""DRA: slices per pool, node selection, shared devices, admin access, device health

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 10:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "dra_slices",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("driver", sa.String(length=253), nullable=False),
        sa.Column("pool", sa.String(length=253), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("slice_count", sa.BigInteger(), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=True),
        sa.Column("devices", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dra_slices")),
        sa.UniqueConstraint("name", name=op.f("uq_dra_slices_name")),
    )
    with op.batch_alter_table("dra_slices", schema=None) as batch_op:
        batch_op.create_index("ix_dra_slices_driver_pool", ["driver", "pool"], unique=False)

    op.create_table(
        "dra_device_health",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("driver", sa.String(length=253), nullable=False),
        sa.Column("pool", sa.String(length=253), nullable=False),
        sa.Column("device", sa.String(length=253), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=True),
        sa.Column("health", sa.String(length=32), nullable=False),
        sa.Column("raw_health", sa.String(length=253), nullable=False),
        sa.Column("health_source", sa.String(length=32), nullable=False),
        sa.Column("reported_by", sa.String(length=320), nullable=True),
        sa.Column("message", sa.String(length=1024), nullable=True),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dra_device_health")),
        sa.UniqueConstraint(
            "driver", "pool", "device", name=op.f("uq_dra_device_health_driver_pool_device")
        ),
    )

    with op.batch_alter_table("dra_devices", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("all_nodes", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column("node_selector", sa.JSON(), nullable=True))
        batch_op.add_column(
            sa.Column("allow_multiple", sa.Boolean(), server_default=sa.false(), nullable=False)
        )

    with op.batch_alter_table("dra_claim_devices", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("admin_access", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column("consumed_capacity", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("conditions", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dra_claim_devices", schema=None) as batch_op:
        batch_op.drop_column("conditions")
        batch_op.drop_column("consumed_capacity")
        batch_op.drop_column("admin_access")

    with op.batch_alter_table("dra_devices", schema=None) as batch_op:
        batch_op.drop_column("allow_multiple")
        batch_op.drop_column("node_selector")
        batch_op.drop_column("all_nodes")

    op.drop_table("dra_device_health")
    with op.batch_alter_table("dra_slices", schema=None) as batch_op:
        batch_op.drop_index("ix_dra_slices_driver_pool")

    op.drop_table("dra_slices")
