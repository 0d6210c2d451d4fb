"""The cluster tables come and go with their own migration, and match the models."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from devicedeck.db import create_db_engine
from devicedeck.inventory.models import Base
from devicedeck.migrate import alembic_config, compares_on, upgrade_to_head

CLUSTER_TABLES = {"kube_pods", "dra_devices", "dra_claims", "dra_claim_devices"}


def test_cluster_tables_migrate_up_and_down(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'migrate.db'}"
    upgrade_to_head(url)
    engine = create_db_engine(url)
    try:
        with engine.connect() as connection:
            # The trigram index exists on PostgreSQL only: not expected on SQLite.
            opts = {"compare_type": True, "include_object": compares_on("sqlite")}
            context = MigrationContext.configure(connection, opts=opts)
            assert compare_metadata(context, Base.metadata) == []
            assert set(inspect(connection).get_table_names()) >= CLUSTER_TABLES
        command.downgrade(alembic_config(url), "0001")
        with engine.connect() as connection:
            tables = set(inspect(connection).get_table_names())
        assert not CLUSTER_TABLES & tables
        assert "nodes" in tables
    finally:
        engine.dispose()
