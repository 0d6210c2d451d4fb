"""cluster tables: pods, DRA devices and claims from the Kubernetes API

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 13:16:18
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dra_claims",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("uid", sa.String(length=64), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("allocated", sa.Boolean(), nullable=False),
        sa.Column("reserved_for", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dra_claims")),
        sa.UniqueConstraint("uid", name=op.f("uq_dra_claims_uid")),
    )
    with op.batch_alter_table("dra_claims", schema=None) as batch_op:
        batch_op.create_index("ix_dra_claims_namespace_name", ["namespace", "name"], unique=False)

    op.create_table(
        "dra_devices",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("slice_name", sa.String(length=253), nullable=False),
        sa.Column("driver", sa.String(length=253), nullable=False),
        sa.Column("pool", sa.String(length=253), nullable=False),
        sa.Column("pool_generation", sa.BigInteger(), nullable=False),
        sa.Column("device", sa.String(length=253), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=True),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.Column("capacity", sa.JSON(), nullable=False),
        sa.Column("taints", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dra_devices")),
        sa.UniqueConstraint("slice_name", "device", name=op.f("uq_dra_devices_slice_name_device")),
    )
    with op.batch_alter_table("dra_devices", schema=None) as batch_op:
        batch_op.create_index(
            "ix_dra_devices_driver_pool_device", ["driver", "pool", "device"], unique=False
        )
        batch_op.create_index("ix_dra_devices_node", ["node"], unique=False)

    op.create_table(
        "kube_pods",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("uid", sa.String(length=64), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=True),
        sa.Column("phase", sa.String(length=32), nullable=True),
        sa.Column("owner_kind", sa.String(length=63), nullable=True),
        sa.Column("owner_name", sa.String(length=253), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("requests", sa.JSON(), nullable=False),
        sa.Column("claims", sa.JSON(), nullable=False),
        sa.Column("resource_health", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kube_pods")),
        sa.UniqueConstraint("uid", name=op.f("uq_kube_pods_uid")),
    )
    with op.batch_alter_table("kube_pods", schema=None) as batch_op:
        batch_op.create_index("ix_kube_pods_namespace_name", ["namespace", "name"], unique=False)
        batch_op.create_index("ix_kube_pods_node", ["node"], unique=False)

    op.create_table(
        "dra_claim_devices",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("claim_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("request", sa.String(length=253), nullable=False),
        sa.Column("driver", sa.String(length=253), nullable=False),
        sa.Column("pool", sa.String(length=253), nullable=False),
        sa.Column("device", sa.String(length=253), nullable=False),
        sa.Column("share_id", sa.String(length=253), nullable=True),
        sa.ForeignKeyConstraint(
            ["claim_id"],
            ["dra_claims.id"],
            name=op.f("fk_dra_claim_devices_claim_id_dra_claims"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dra_claim_devices")),
    )
    with op.batch_alter_table("dra_claim_devices", schema=None) as batch_op:
        batch_op.create_index("ix_dra_claim_devices_claim_id", ["claim_id"], unique=False)
        batch_op.create_index(
            "ix_dra_claim_devices_driver_pool_device", ["driver", "pool", "device"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("dra_claim_devices", schema=None) as batch_op:
        batch_op.drop_index("ix_dra_claim_devices_driver_pool_device")
        batch_op.drop_index("ix_dra_claim_devices_claim_id")

    op.drop_table("dra_claim_devices")
    with op.batch_alter_table("kube_pods", schema=None) as batch_op:
        batch_op.drop_index("ix_kube_pods_node")
        batch_op.drop_index("ix_kube_pods_namespace_name")

    op.drop_table("kube_pods")
    with op.batch_alter_table("dra_devices", schema=None) as batch_op:
        batch_op.drop_index("ix_dra_devices_node")
        batch_op.drop_index("ix_dra_devices_driver_pool_device")

    op.drop_table("dra_devices")
    with op.batch_alter_table("dra_claims", schema=None) as batch_op:
        batch_op.drop_index("ix_dra_claims_namespace_name")

    op.drop_table("dra_claims")
