"""devices.node_name and indexes that match the device and pod lists' filters, sorts, search

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 11:00:00

The device list sorts by node name first; with the name only in `nodes`, every page sorted the
whole fleet. `devices.node_name` (set by a trigger from the node row, whoever inserts; node names
never change) lets one index give each sort's order, so a page reads about a page of rows.
On PostgreSQL a trigram index (pg_trgm) serves the device-ID substring search.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NOT_HEALTHY_PRESENT = "state = 'present' AND health <> 'Healthy'"
REMOVED = "state = 'removed'"


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("devices") as batch:
        batch.add_column(
            sa.Column("node_name", sa.String(length=253), nullable=False, server_default="")
        )
    op.execute("UPDATE devices SET node_name = (SELECT name FROM nodes WHERE id = node_id)")
    if postgresql:
        op.execute(
            "CREATE FUNCTION devices_node_name() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "SELECT name INTO NEW.node_name FROM nodes WHERE id = NEW.node_id; RETURN NEW; "
            "END $$"
        )
        op.execute(
            "CREATE TRIGGER devices_node_name BEFORE INSERT ON devices FOR EACH ROW "
            "EXECUTE FUNCTION devices_node_name()"
        )
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        op.execute(
            "CREATE INDEX ix_devices_device_id_trigram ON devices "
            "USING gin (device_id gin_trgm_ops)"
        )
    else:
        op.execute(
            "CREATE TRIGGER devices_node_name AFTER INSERT ON devices BEGIN "
            "UPDATE devices SET node_name = (SELECT name FROM nodes WHERE id = NEW.node_id) "
            "WHERE id = NEW.id; END"
        )
    sorts = {
        "ix_devices_by_node": ["node_name", "resource", "device_id", "id"],
        "ix_devices_by_resource": ["resource", "node_name", "device_id", "id"],
    }
    for name, columns in sorts.items():
        op.create_index(name, "devices", columns)
    op.create_index(
        "ix_devices_not_healthy",
        "devices",
        ["node_name", "resource", "device_id", "id"],
        postgresql_where=sa.text(NOT_HEALTHY_PRESENT),
        sqlite_where=sa.text(NOT_HEALTHY_PRESENT),
    )
    for table in ("allocations", "claim_allocations"):
        op.create_index(
            f"ix_{table}_current_pod",
            table,
            ["namespace", "pod"],
            postgresql_where=sa.text("ended IS NULL"),
            sqlite_where=sa.text("ended IS NULL"),
        )
    op.create_index(
        "ix_devices_removed",
        "devices",
        ["removed_at"],
        postgresql_where=sa.text(REMOVED),
        sqlite_where=sa.text(REMOVED),
    )


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for table in ("allocations", "claim_allocations"):
        op.drop_index(f"ix_{table}_current_pod", table)
    for name in ("ix_devices_removed", "ix_devices_not_healthy"):
        op.drop_index(name, "devices")
    for name in ("ix_devices_by_resource", "ix_devices_by_node"):
        op.drop_index(name, "devices")
    if postgresql:
        op.drop_index("ix_devices_device_id_trigram", "devices")
        op.execute("DROP TRIGGER devices_node_name ON devices")
        op.execute("DROP FUNCTION devices_node_name()")
    else:
        op.execute("DROP TRIGGER devices_node_name")
    # Not batch: rebuilding the table would break the triggers on allocations that name it.
    op.execute("ALTER TABLE devices DROP COLUMN node_name")
