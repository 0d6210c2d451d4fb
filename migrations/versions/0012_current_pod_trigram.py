"""allocations, claim_allocations: trigram indexes of current holders' pod names

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 17:15:00

The pods list's `q` (a substring of the pod's name) read every current allocation (160,000 at
320,000 devices, 20-30 ms a statement, three statements a request). On PostgreSQL a trigram
index (pg_trgm, created in 0006) over current allocations finds them; SQLite scans.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("allocations", "claim_allocations")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for table in TABLES:
        op.execute(
            f"CREATE INDEX ix_{table}_current_pod_trigram ON {table} "
            "USING gin (pod gin_trgm_ops) WHERE ended IS NULL"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.drop_index(f"ix_{table}_current_pod_trigram", table)
