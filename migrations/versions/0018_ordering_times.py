"""ingest_receipts.boot_started_at and dra_health_reports.observed_at: what orders snapshots
across an agent's boots, and DRA health reports of one device

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 08:00:00

Both are empty for what was stored before, and for agents that do not send a boot's start:
such snapshots and reports are ordered as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "ingest_receipts",
        sa.Column("boot_started_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.add_column(
        "dra_health_reports",
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE dra_health_reports DROP COLUMN observed_at")
    op.execute("ALTER TABLE ingest_receipts DROP COLUMN boot_started_at")
