"""device_incidents: each spell of a device reported Unhealthy, and each removal, kept by triggers

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 07:40:00

A row per spell: when a device's reported health turned Unhealthy and when it turned back (or
open), and when it was removed and when it came back (or open). A trigger on the change log
writes them in the transaction of the event, whoever logs it, so the reliability figures read
a few rows per failing device instead of the whole change log. Existing history is replayed.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNHEALTHY = "Unhealthy"
HEALTH_KINDS = ("device_added", "health_changed")
KINDS = (*HEALTH_KINDS, "device_removed", "device_reappeared")


def _open(kind: str, device: str, at: str) -> str:
    return (
        "INSERT INTO device_incidents (device_pk, kind, started, node, resource) "
        f"SELECT {device}, '{kind}', {at}, NEW.node, NEW.resource "
        f"WHERE NOT EXISTS (SELECT 1 FROM device_incidents WHERE device_pk = {device} "
        f"AND kind = '{kind}' AND ended IS NULL);"
    )


def _close(kind: str, device: str, at: str) -> str:
    return (
        f"UPDATE device_incidents SET ended = {at} WHERE device_pk = {device} "
        f"AND kind = '{kind}' AND ended IS NULL;"
    )


def _postgresql_triggers() -> list[str]:
    health = "NEW.\"after\"->>'health'"
    body = (
        "IF NEW.kind IN ('device_added', 'health_changed') THEN "
        f"IF {health} = '{UNHEALTHY}' THEN {_open('unhealthy', 'NEW.device_pk', 'NEW.at')} "
        f"ELSIF {health} IS NOT NULL THEN {_close('unhealthy', 'NEW.device_pk', 'NEW.at')} "
        "END IF; "
        f"ELSIF NEW.kind = 'device_removed' THEN {_open('removed', 'NEW.device_pk', 'NEW.at')} "
        f"ELSE {_close('removed', 'NEW.device_pk', 'NEW.at')} END IF;"
    )
    kinds = ", ".join(f"'{k}'" for k in KINDS)
    return [
        "CREATE FUNCTION device_incidents_on_event() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN {body} RETURN NULL; END $$",
        "CREATE TRIGGER device_incidents_event AFTER INSERT ON events FOR EACH ROW "
        f"WHEN (NEW.device_pk IS NOT NULL AND NEW.kind IN ({kinds})) "
        "EXECUTE FUNCTION device_incidents_on_event()",
    ]


def _sqlite_triggers() -> list[str]:
    health = "json_extract(NEW.\"after\", '$.health')"
    named = "NEW.device_pk IS NOT NULL AND NEW.kind IN ('device_added', 'health_changed')"
    cases = {
        "device_incidents_unhealthy": (
            f"{named} AND {health} = '{UNHEALTHY}'",
            _open("unhealthy", "NEW.device_pk", "NEW.at"),
        ),
        "device_incidents_recovered": (
            f"{named} AND {health} IS NOT NULL AND {health} <> '{UNHEALTHY}'",
            _close("unhealthy", "NEW.device_pk", "NEW.at"),
        ),
        "device_incidents_removed": (
            "NEW.device_pk IS NOT NULL AND NEW.kind = 'device_removed'",
            _open("removed", "NEW.device_pk", "NEW.at"),
        ),
        "device_incidents_reappeared": (
            "NEW.device_pk IS NOT NULL AND NEW.kind = 'device_reappeared'",
            _close("removed", "NEW.device_pk", "NEW.at"),
        ),
    }
    return [
        f"CREATE TRIGGER {name} AFTER INSERT ON events WHEN {when} BEGIN {action} END"
        for name, (when, action) in cases.items()
    ]


SQLITE_TRIGGERS = (
    "device_incidents_unhealthy",
    "device_incidents_recovered",
    "device_incidents_removed",
    "device_incidents_reappeared",
)


def _replay(bind: sa.Connection) -> None:
    """The spells the existing change log describes, as the trigger would have written them."""
    events = sa.table(
        "events",
        sa.column("id"),
        sa.column("at"),
        sa.column("kind"),
        sa.column("device_pk"),
        sa.column("node"),
        sa.column("resource"),
        sa.column("after", sa.JSON()),
    )
    incidents = sa.table(
        "device_incidents",
        sa.column("device_pk"),
        sa.column("kind"),
        sa.column("started"),
        sa.column("ended"),
        sa.column("node"),
        sa.column("resource"),
    )
    rows = bind.execute(
        sa.select(
            events.c.at,
            events.c.kind,
            events.c.device_pk,
            events.c.node,
            events.c.resource,
            events.c.after,
        )
        .where(events.c.device_pk.is_not(None), events.c.kind.in_(KINDS))
        .order_by(events.c.device_pk, events.c.id)
        .execution_options(yield_per=5000)
    )
    spells: list[dict[str, object]] = []
    opened: dict[tuple[object, str], dict[str, object]] = {}
    for at, kind, device_pk, node, resource, after in rows:
        if kind in HEALTH_KINDS:
            health = (after or {}).get("health")
            spell = "unhealthy"
            starts = health == UNHEALTHY
            if health is None:
                continue
        else:
            spell = "removed"
            starts = kind == "device_removed"
        key = (device_pk, spell)
        if starts and key not in opened:
            opened[key] = {
                "device_pk": device_pk,
                "kind": spell,
                "started": at,
                "ended": None,
                "node": node,
                "resource": resource,
            }
            spells.append(opened[key])
        elif not starts and key in opened:
            opened.pop(key)["ended"] = at
    for start in range(0, len(spells), 5000):
        bind.execute(sa.insert(incidents), spells[start : start + 5000])


def upgrade() -> None:
    bind = op.get_bind()
    op.create_table(
        "device_incidents",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "device_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("started", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended", sa.DateTime(timezone=True), nullable=True),
        # The device's node and resource, copied from the event: the ranking filters and
        # groups by them without reading the devices.
        sa.Column("node", sa.String(length=253), nullable=True),
        sa.Column("resource", sa.String(length=316), nullable=True),
        sa.ForeignKeyConstraint(
            ["device_pk"],
            ["devices.id"],
            name=op.f("fk_device_incidents_device_pk_devices"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_device_incidents")),
    )
    with op.batch_alter_table("device_incidents") as batch:
        batch.create_index("ix_device_incidents_device_started", ["device_pk", "started"])
        batch.create_index("ix_device_incidents_started", ["started"])
        batch.create_index(
            "ix_device_incidents_open",
            ["device_pk", "kind"],
            unique=True,
            postgresql_where=sa.text("ended IS NULL"),
            sqlite_where=sa.text("ended IS NULL"),
        )
    _replay(bind)
    postgresql = bind.dialect.name == "postgresql"
    for statement in _postgresql_triggers() if postgresql else _sqlite_triggers():
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER device_incidents_event ON events")
        op.execute("DROP FUNCTION device_incidents_on_event()")
    else:
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    op.drop_table("device_incidents")
