"""API tokens bound to a node: node, all_nodes

Ingest tokens made before the binding existed keep writing every node (all_nodes), as they
did; new ones must name their node or ask for all nodes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 11:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("node", sa.String(length=253), nullable=True))
        batch_op.add_column(
            sa.Column("all_nodes", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    op.execute(
        sa.text(
            "UPDATE api_tokens SET all_nodes = TRUE WHERE CAST(scopes AS TEXT) LIKE '%\"ingest\"%'"
        )
    )


def downgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_column("all_nodes")
        batch_op.drop_column("node")
