"""devices: the node's name is looked up only for a row inserted without it

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 05:00:00

The trigger that copies the node's name into each new device row looked the name up once per row:
for a new node's 56 devices, about a sixth of the time PostgreSQL spent inserting them. The
snapshot paths now write the name themselves; the trigger still fills it for any other insert.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_POSTGRESQL_TRIGGER = (
    "CREATE TRIGGER devices_node_name BEFORE INSERT ON devices FOR EACH ROW {when}"
    "EXECUTE FUNCTION devices_node_name()"
)
_SQLITE_TRIGGER = (
    "CREATE TRIGGER devices_node_name AFTER INSERT ON devices {when}BEGIN "
    "UPDATE devices SET node_name = (SELECT name FROM nodes WHERE id = NEW.node_id) "
    "WHERE id = NEW.id; END"
)
# The column's server default, which a row inserted without the name has.
_WHEN_MISSING = "WHEN (NEW.node_name = '') "


def _replace_trigger(when: str) -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:
        op.execute("DROP TRIGGER devices_node_name ON devices")
        op.execute(_POSTGRESQL_TRIGGER.format(when=when))
    else:
        op.execute("DROP TRIGGER devices_node_name")
        op.execute(_SQLITE_TRIGGER.format(when=when))


def upgrade() -> None:
    _replace_trigger(_WHEN_MISSING)


def downgrade() -> None:
    _replace_trigger("")
