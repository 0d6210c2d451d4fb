"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-02 13:03:44.696953
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "api_tokens",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_api_tokens_name")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=True),
        sa.Column("resource", sa.String(length=316), nullable=True),
        sa.Column("device_id", sa.String(length=253), nullable=True),
        sa.Column("device_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("namespace", sa.String(length=63), nullable=True),
        sa.Column("pod", sa.String(length=253), nullable=True),
        sa.Column("container", sa.String(length=253), nullable=True),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=True),
        sa.Column("actor", sa.String(length=253), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index("ix_events_at", ["at"], unique=False)
        batch_op.create_index("ix_events_device_pk_id", ["device_pk", "id"], unique=False)
        batch_op.create_index("ix_events_kind_id", ["kind", "id"], unique=False)
        batch_op.create_index("ix_events_node_id", ["node", "id"], unique=False)
        batch_op.create_index("ix_events_resource_id", ["resource", "id"], unique=False)

    op.create_table(
        "nodes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stale_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("capacity", sa.JSON(), nullable=True),
        sa.Column("allocatable", sa.JSON(), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=True),
        sa.Column("conditions", sa.JSON(), nullable=True),
        sa.Column("kube_synced_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_nodes")),
        sa.UniqueConstraint("name", name=op.f("uq_nodes_name")),
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_nodes_last_seen"), ["last_seen"], unique=False)

    op.create_table(
        "service_state",
        sa.Column("key", sa.String(length=100), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_service_state")),
    )
    op.create_table(
        "claim_allocations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("node_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("pod", sa.String(length=253), nullable=False),
        sa.Column("container", sa.String(length=253), nullable=False),
        sa.Column("claim_namespace", sa.String(length=63), nullable=False),
        sa.Column("claim_name", sa.String(length=253), nullable=False),
        sa.Column("driver", sa.String(length=253), nullable=False),
        sa.Column("pool", sa.String(length=253), nullable=False),
        sa.Column("device", sa.String(length=253), nullable=False),
        sa.Column("share_id", sa.String(length=253), nullable=True),
        sa.Column("cdi_devices", sa.JSON(), nullable=False),
        sa.Column("started", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["nodes.id"],
            name=op.f("fk_claim_allocations_node_id_nodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_claim_allocations")),
    )
    with op.batch_alter_table("claim_allocations", schema=None) as batch_op:
        batch_op.create_index(
            "ix_claim_allocations_current_node",
            ["node_id"],
            unique=False,
            postgresql_where=sa.text("ended IS NULL"),
            sqlite_where=sa.text("ended IS NULL"),
        )
        batch_op.create_index(
            "ix_claim_allocations_namespace_pod", ["namespace", "pod"], unique=False
        )

    op.create_table(
        "devices",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("node_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("resource", sa.String(length=316), nullable=False),
        sa.Column("device_id", sa.String(length=253), nullable=False),
        sa.Column("health", sa.String(length=16), nullable=False),
        sa.Column("raw_health", sa.String(length=64), nullable=True),
        sa.Column("health_source", sa.String(length=16), nullable=False),
        sa.Column("numa_nodes", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("health_changed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name=op.f("fk_devices_node_id_nodes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_devices")),
        sa.UniqueConstraint(
            "node_id", "resource", "device_id", name=op.f("uq_devices_node_id_resource_device_id")
        ),
    )
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.create_index("ix_devices_device_id", ["device_id"], unique=False)
        batch_op.create_index("ix_devices_resource_health", ["resource", "health"], unique=False)

    op.create_table(
        "ingest_receipts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("node_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("stream", sa.String(length=400), nullable=False),
        sa.Column("boot_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("payload_hash", sa.String(length=64), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["nodes.id"],
            name=op.f("fk_ingest_receipts_node_id_nodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingest_receipts")),
        sa.UniqueConstraint("node_id", "stream", name=op.f("uq_ingest_receipts_node_id_stream")),
    )
    op.create_table(
        "node_resources",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("node_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("resource", sa.String(length=316), nullable=False),
        sa.Column("allocatable_device_ids", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["nodes.id"],
            name=op.f("fk_node_resources_node_id_nodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_resources")),
        sa.UniqueConstraint("node_id", "resource", name=op.f("uq_node_resources_node_id_resource")),
    )
    op.create_table(
        "plugin_registrations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("node_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("resource", sa.String(length=316), nullable=False),
        sa.Column("endpoint", sa.String(length=512), nullable=True),
        sa.Column("api_version", sa.String(length=32), nullable=True),
        sa.Column("options", sa.JSON(), nullable=True),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["nodes.id"],
            name=op.f("fk_plugin_registrations_node_id_nodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_plugin_registrations")),
        sa.UniqueConstraint(
            "node_id", "resource", name=op.f("uq_plugin_registrations_node_id_resource")
        ),
    )
    op.create_table(
        "allocations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("node_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "device_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("pod", sa.String(length=253), nullable=False),
        sa.Column("pod_uid", sa.String(length=64), nullable=True),
        sa.Column("container", sa.String(length=253), nullable=False),
        sa.Column("resource", sa.String(length=316), nullable=False),
        sa.Column("device_id", sa.String(length=253), nullable=False),
        sa.Column("started", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["device_pk"],
            ["devices.id"],
            name=op.f("fk_allocations_device_pk_devices"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name=op.f("fk_allocations_node_id_nodes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_allocations")),
    )
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.create_index(
            "ix_allocations_current_device",
            ["device_pk"],
            unique=False,
            postgresql_where=sa.text("ended IS NULL"),
            sqlite_where=sa.text("ended IS NULL"),
        )
        batch_op.create_index(
            "ix_allocations_current_node",
            ["node_id"],
            unique=False,
            postgresql_where=sa.text("ended IS NULL"),
            sqlite_where=sa.text("ended IS NULL"),
        )
        batch_op.create_index(
            "ix_allocations_device_started", ["device_pk", "started"], unique=False
        )
        batch_op.create_index("ix_allocations_namespace_pod", ["namespace", "pod"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_index("ix_allocations_namespace_pod")
        batch_op.drop_index("ix_allocations_device_started")
        batch_op.drop_index(
            "ix_allocations_current_node",
            postgresql_where=sa.text("ended IS NULL"),
            sqlite_where=sa.text("ended IS NULL"),
        )
        batch_op.drop_index(
            "ix_allocations_current_device",
            postgresql_where=sa.text("ended IS NULL"),
            sqlite_where=sa.text("ended IS NULL"),
        )

    op.drop_table("allocations")
    op.drop_table("plugin_registrations")
    op.drop_table("node_resources")
    op.drop_table("ingest_receipts")
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.drop_index("ix_devices_resource_health")
        batch_op.drop_index("ix_devices_device_id")

    op.drop_table("devices")
    with op.batch_alter_table("claim_allocations", schema=None) as batch_op:
        batch_op.drop_index("ix_claim_allocations_namespace_pod")
        batch_op.drop_index(
            "ix_claim_allocations_current_node",
            postgresql_where=sa.text("ended IS NULL"),
            sqlite_where=sa.text("ended IS NULL"),
        )

    op.drop_table("claim_allocations")
    op.drop_table("service_state")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_nodes_last_seen"))

    op.drop_table("nodes")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index("ix_events_resource_id")
        batch_op.drop_index("ix_events_node_id")
        batch_op.drop_index("ix_events_kind_id")
        batch_op.drop_index("ix_events_device_pk_id")
        batch_op.drop_index("ix_events_at")

    op.drop_table("events")
    op.drop_table("api_tokens")
