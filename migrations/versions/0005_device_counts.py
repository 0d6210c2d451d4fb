"""device counts per node and resource and devices.held, kept by triggers

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 10:40:00

`device_counts` holds, per node and resource, the present devices by health and whether a
container holds them; `devices.held` the number of current allocations of a device. Triggers
keep both in the transaction of every write, whoever writes (ingest, the pod sync, the stale
sweep, an admin), so the overview, the node list, /api/v1/resources and /metrics read a few
thousand counter rows instead of aggregating every device.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COUNTERS = ("devices", "healthy", "unhealthy", "unknown", "allocated", "free")

# What one device row adds to its (node, resource) counters, as SQL over a row alias.
# A device counts only while present; free means healthy and held by no container.
CONTRIBUTION = {
    "devices": "1",
    "healthy": "CASE WHEN {r}.health = 'Healthy' THEN 1 ELSE 0 END",
    "unhealthy": "CASE WHEN {r}.health = 'Unhealthy' THEN 1 ELSE 0 END",
    "unknown": "CASE WHEN {r}.health NOT IN ('Healthy', 'Unhealthy') THEN 1 ELSE 0 END",
    "allocated": "CASE WHEN {r}.held > 0 THEN 1 ELSE 0 END",
    "free": "CASE WHEN {r}.health = 'Healthy' AND {r}.held = 0 THEN 1 ELSE 0 END",
}


def _contributions(alias: str, sign: str) -> str:
    return ", ".join(f"{sign}({CONTRIBUTION[c].format(r=alias)}) AS {c}" for c in COUNTERS)


ADD_ON_CONFLICT = "ON CONFLICT (node_id, resource) DO UPDATE SET " + ", ".join(
    f"{c} = device_counts.{c} + excluded.{c}" for c in COUNTERS
)
COLUMNS = ", ".join(COUNTERS)
SUMS = ", ".join(f"sum({c})" for c in COUNTERS)
ANY_CHANGE = " OR ".join(f"sum({c}) <> 0" for c in COUNTERS)


def _postgresql_triggers() -> list[str]:
    """Statement triggers with transition tables: one counter upsert per statement and
    (node, resource), not one per device row."""
    delta = (
        f"SELECT node_id, resource, {_contributions('n', '+')} FROM new_rows n "
        "WHERE n.state = 'present' UNION ALL "
        f"SELECT node_id, resource, {_contributions('o', '-')} FROM old_rows o "
        "WHERE o.state = 'present'"
    )
    added = (
        f"SELECT node_id, resource, {_contributions('n', '+')} FROM new_rows n "
        "WHERE n.state = 'present'"
    )
    removed = (
        f"SELECT node_id, resource, {_contributions('o', '-')} FROM old_rows o "
        "WHERE o.state = 'present'"
    )

    def upsert(rows: str) -> str:
        return (
            f"INSERT INTO device_counts (node_id, resource, {COLUMNS}) "
            f"SELECT node_id, resource, {SUMS} FROM ({rows}) d GROUP BY node_id, resource "
            f"HAVING {ANY_CHANGE} {ADD_ON_CONFLICT};"
        )

    # A device deleted with its node (ON DELETE CASCADE) must not re-create the node's counter
    # row, which the same cascade removes: deletes only update rows that still exist.
    subtract = (
        "UPDATE device_counts c SET "
        + ", ".join(f"{c} = c.{c} + d.{c}" for c in COUNTERS)
        + " FROM (SELECT node_id, resource, "
        + ", ".join(f"sum({c}) AS {c}" for c in COUNTERS)
        + f" FROM ({removed}) x GROUP BY node_id, resource) d "
        "WHERE c.node_id = d.node_id AND c.resource = d.resource;"
    )
    held_delta = (
        "UPDATE devices SET held = devices.held + d.delta FROM ("
        "SELECT device_pk, sum(delta) AS delta FROM ("
        "SELECT device_pk, 1 AS delta FROM new_rows WHERE ended IS NULL UNION ALL "
        "SELECT device_pk, -1 AS delta FROM old_rows WHERE ended IS NULL) x "
        "GROUP BY device_pk HAVING sum(delta) <> 0) d WHERE devices.id = d.device_pk;"
    )
    held_added = held_delta.replace(
        " UNION ALL SELECT device_pk, -1 AS delta FROM old_rows WHERE ended IS NULL", ""
    )
    held_removed = held_delta.replace(
        "SELECT device_pk, 1 AS delta FROM new_rows WHERE ended IS NULL UNION ALL ", ""
    )
    functions = {
        "device_counts_on_insert": upsert(added),
        "device_counts_on_update": upsert(delta),
        "device_counts_on_delete": subtract,
        "device_held_on_insert": held_added,
        "device_held_on_update": held_delta,
        "device_held_on_delete": held_removed,
    }
    statements = [
        f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN {body} RETURN NULL; END $$"
        for name, body in functions.items()
    ]
    for table, prefix in (("devices", "device_counts"), ("allocations", "device_held")):
        statements += [
            f"CREATE TRIGGER {prefix}_insert AFTER INSERT ON {table} "
            f"REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {prefix}_on_insert()",
            f"CREATE TRIGGER {prefix}_update AFTER UPDATE ON {table} "
            f"REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {prefix}_on_update()",
            f"CREATE TRIGGER {prefix}_delete AFTER DELETE ON {table} "
            f"REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {prefix}_on_delete()",
        ]
    return statements


def _sqlite_triggers() -> list[str]:
    """Row triggers (SQLite has no statement triggers); the same arithmetic, a row at a time."""

    def add(row: str) -> str:
        values = ", ".join(CONTRIBUTION[c].format(r=row) for c in COUNTERS)
        return (
            f"INSERT INTO device_counts (node_id, resource, {COLUMNS}) "
            f"SELECT {row}.node_id, {row}.resource, {values} WHERE {row}.state = 'present' "
            f"{ADD_ON_CONFLICT};"
        )

    def subtract(row: str) -> str:
        sets = ", ".join(f"{c} = {c} - ({CONTRIBUTION[c].format(r=row)})" for c in COUNTERS)
        return (
            f"UPDATE device_counts SET {sets} WHERE {row}.state = 'present' "
            f"AND node_id = {row}.node_id AND resource = {row}.resource;"
        )

    counted = "state, health, held, node_id, resource"
    return [
        f"CREATE TRIGGER device_counts_insert AFTER INSERT ON devices BEGIN {add('NEW')} END",
        f"CREATE TRIGGER device_counts_update AFTER UPDATE OF {counted} ON devices "
        f"BEGIN {subtract('OLD')} {add('NEW')} END",
        f"CREATE TRIGGER device_counts_delete AFTER DELETE ON devices BEGIN {subtract('OLD')} END",
        "CREATE TRIGGER device_held_insert AFTER INSERT ON allocations WHEN NEW.ended IS NULL "
        "BEGIN UPDATE devices SET held = held + 1 WHERE id = NEW.device_pk; END",
        "CREATE TRIGGER device_held_update AFTER UPDATE OF ended, device_pk ON allocations "
        "BEGIN "
        "UPDATE devices SET held = held - 1 WHERE OLD.ended IS NULL AND id = OLD.device_pk; "
        "UPDATE devices SET held = held + 1 WHERE NEW.ended IS NULL AND id = NEW.device_pk; "
        "END",
        "CREATE TRIGGER device_held_delete AFTER DELETE ON allocations WHEN OLD.ended IS NULL "
        "BEGIN UPDATE devices SET held = held - 1 WHERE id = OLD.device_pk; END",
    ]


TRIGGERS = {
    "devices": ("device_counts_insert", "device_counts_update", "device_counts_delete"),
    "allocations": ("device_held_insert", "device_held_update", "device_held_delete"),
}
FUNCTIONS = (
    "device_counts_on_insert",
    "device_counts_on_update",
    "device_counts_on_delete",
    "device_held_on_insert",
    "device_held_on_update",
    "device_held_on_delete",
)


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "device_counts",
        sa.Column("node_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("resource", sa.String(length=316), nullable=False),
        *(sa.Column(c, sa.Integer(), nullable=False, server_default="0") for c in COUNTERS),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["nodes.id"],
            name=op.f("fk_device_counts_node_id_nodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("node_id", "resource", name=op.f("pk_device_counts")),
    )
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("held", sa.Integer(), nullable=False, server_default="0"))
    op.execute(
        "UPDATE devices SET held = (SELECT count(*) FROM allocations a "
        "WHERE a.device_pk = devices.id AND a.ended IS NULL)"
    )
    sums = ", ".join(f"sum({CONTRIBUTION[c].format(r='d')})" for c in COUNTERS)
    op.execute(
        f"INSERT INTO device_counts (node_id, resource, {COLUMNS}) SELECT node_id, resource, "
        f"{sums} FROM devices d WHERE d.state = 'present' GROUP BY node_id, resource"
    )
    for statement in _postgresql_triggers() if postgresql else _sqlite_triggers():
        op.execute(statement)


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for table, names in TRIGGERS.items():
        for name in names:
            op.execute(f"DROP TRIGGER {name} ON {table}" if postgresql else f"DROP TRIGGER {name}")
    if postgresql:
        for function in FUNCTIONS:
            op.execute(f"DROP FUNCTION {function}()")
    # Not batch: rebuilding the table would break the triggers on allocations that name it.
    op.execute("ALTER TABLE devices DROP COLUMN held")
    op.drop_table("device_counts")
