"""watchlist: devices marked for return; unhealthy-transition counters on devices and
device_counts, kept by triggers

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 07:40:00

A mark says who put a device on the watch list, when, and why; it goes with the device's row.
`unhealthy_transitions` counts the times a device turned Unhealthy from any other health, on
the device and summed per node and resource, for the flap counter of /metrics. A trigger keeps
both in the writer's own transaction, whoever writes, and only a write that turns a device
Unhealthy runs it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TURNED_UNHEALTHY = "NEW.health = 'Unhealthy' AND OLD.health <> 'Unhealthy'"
COUNT_ON_NODE = (
    "INSERT INTO device_counts (node_id, resource, unhealthy_transitions) "
    "VALUES (NEW.node_id, NEW.resource, 1) ON CONFLICT (node_id, resource) DO UPDATE "
    "SET unhealthy_transitions = device_counts.unhealthy_transitions + 1;"
)


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "watchlist",
        sa.Column(
            "device_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("marked_by", sa.String(length=253), nullable=False),
        sa.Column("marked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("note", sa.String(length=500), nullable=True),
        sa.ForeignKeyConstraint(
            ["device_pk"],
            ["devices.id"],
            name=op.f("fk_watchlist_device_pk_devices"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("device_pk", name=op.f("pk_watchlist")),
    )
    op.create_index("ix_watchlist_marked_at", "watchlist", ["marked_at"])
    # Plain ALTERs, not batch: rebuilding devices would drop the triggers that name it.
    op.execute("ALTER TABLE devices ADD COLUMN unhealthy_transitions INTEGER NOT NULL DEFAULT 0")
    op.execute(
        "ALTER TABLE device_counts ADD COLUMN unhealthy_transitions INTEGER NOT NULL DEFAULT 0"
    )
    if postgresql:
        op.execute(
            "CREATE FUNCTION devices_count_unhealthy() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN NEW.unhealthy_transitions := OLD.unhealthy_transitions + 1; "
            f"{COUNT_ON_NODE} RETURN NEW; END $$"
        )
        op.execute(
            "CREATE TRIGGER devices_count_unhealthy BEFORE UPDATE OF health ON devices "
            f"FOR EACH ROW WHEN ({TURNED_UNHEALTHY}) "
            "EXECUTE FUNCTION devices_count_unhealthy()"
        )
    else:
        op.execute(
            "CREATE TRIGGER devices_count_unhealthy AFTER UPDATE OF health ON devices "
            f"WHEN {TURNED_UNHEALTHY} BEGIN "
            "UPDATE devices SET unhealthy_transitions = unhealthy_transitions + 1 "
            f"WHERE id = NEW.id; {COUNT_ON_NODE} END"
        )


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:
        op.execute("DROP TRIGGER devices_count_unhealthy ON devices")
        op.execute("DROP FUNCTION devices_count_unhealthy()")
    else:
        op.execute("DROP TRIGGER devices_count_unhealthy")
    op.execute("ALTER TABLE device_counts DROP COLUMN unhealthy_transitions")
    op.execute("ALTER TABLE devices DROP COLUMN unhealthy_transitions")
    op.drop_index("ix_watchlist_marked_at", table_name="watchlist")
    op.drop_table("watchlist")
