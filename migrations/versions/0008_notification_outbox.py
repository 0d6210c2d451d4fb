"""notification_outbox: alert transitions owed to webhook targets

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 14:00:00

Rows are written in the transaction of the event that causes them (only while a webhook URL is
configured) and sent by the leading replica; a delivered row stays a while, then is pruned.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = "state = 'pending'"


def upgrade() -> None:
    op.create_table(
        "notification_outbox",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("target", sa.String(length=64), nullable=False),
        sa.Column("dedupe_key", sa.String(length=64), nullable=False),
        sa.Column("fingerprint", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("annotations", sa.JSON(), nullable=False),
        sa.Column("generator_url", sa.String(length=2048), nullable=True),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_outbox")),
    )
    op.create_index(
        "ix_notification_outbox_pending",
        "notification_outbox",
        ["target", "id"],
        postgresql_where=sa.text(PENDING),
        sqlite_where=sa.text(PENDING),
    )
    op.create_index(
        "ix_notification_outbox_fingerprint_id", "notification_outbox", ["fingerprint", "id"]
    )
    op.create_index("ix_notification_outbox_done_at", "notification_outbox", ["done_at"])


def downgrade() -> None:
    op.drop_table("notification_outbox")
