"""devices: pages filled to 80 %, for updates that touch no index

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 05:40:00

A PodResources snapshot changes `held` on every device a pod starts or stops holding. No index
covers that column, so PostgreSQL can keep the new row version on the same page without
touching an index, if the page has room; inserts filled every page. Existing pages keep what
they hold; pages filled from now on keep a fifth free.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE devices SET (fillfactor = 80)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE devices RESET (fillfactor)")
