"""devices: an index of present devices' ids

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 17:10:00

The holder filters (namespace, pod) find a namespace's current allocations first and then
check each one's device is present. From the table that took a random heap read per device,
and PostgreSQL preferred to read every device instead (about 100 ms at 320,000 devices, for
8,000 allocations); from this index each check is an index-only lookup.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PRESENT = "state = 'present'"


def upgrade() -> None:
    op.create_index(
        "ix_devices_present_id",
        "devices",
        ["id"],
        postgresql_where=sa.text(PRESENT),
        sqlite_where=sa.text(PRESENT),
    )


def downgrade() -> None:
    op.drop_index("ix_devices_present_id", "devices")
