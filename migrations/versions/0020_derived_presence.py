"""devices.presence_uncertain and nodes.derived_basis: derived health that says what it cannot tell

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 07:30:00

A device of an untapped resource that the kubelet does not offer may be unhealthy or removed;
when the Node's counts cannot say which, `presence_uncertain` marks it. `derived_basis` holds,
per resource, the last observation the rule judged (capacity, devices offered, and what it
concluded of each other device), which the next observation is compared with
(devicedeck/inventory/write/derived_health.py).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "devices",
        sa.Column("presence_uncertain", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    op.add_column("nodes", sa.Column("derived_basis", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE nodes DROP COLUMN derived_basis")
    op.execute("ALTER TABLE devices DROP COLUMN presence_uncertain")
