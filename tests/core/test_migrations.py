"""Alembic migrations: upgrade an empty database, match the models, downgrade to nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import make_url

from app.db import create_db_engine
from app.inventory.models import Base
from app.migrate import downgrade_to_base, upgrade_to_head


def _libpq(url: str) -> str:
    parsed = make_url(url)
    return (
        f"host={parsed.host or '127.0.0.1'} port={parsed.port or 5432} "
        f"user={parsed.username or 'postgres'} dbname=postgres"
        + (f" password={parsed.password}" if parsed.password else "")
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no tables at all, made for this test alone."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/empty.db"
        return
    shared: str = request.getfixturevalue("postgres_url")
    name = f"devicedeck_migrations_{os.getpid()}"
    with psycopg.connect(_libpq(shared), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(shared).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(_libpq(shared), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def table_names(url: str) -> set[str]:
    engine = create_db_engine(url)
    try:
        with engine.connect() as conn:
            return set(inspect(conn).get_table_names())
    finally:
        engine.dispose()


def schema_diff(url: str) -> list[object]:
    engine = create_db_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def test_upgrade_matches_models_and_downgrade_removes_everything(empty_database_url: str) -> None:
    url = empty_database_url
    assert table_names(url) == set()

    upgrade_to_head(url)
    expected = {table.name for table in Base.metadata.sorted_tables}
    assert {"nodes", "devices", "allocations", "events", "api_tokens"} <= expected
    assert table_names(url) == expected | {"alembic_version"}
    assert schema_diff(url) == []
    # Running it again is a no-op.
    upgrade_to_head(url)

    downgrade_to_base(url)
    assert table_names(url) == {"alembic_version"}

    # And back up again from nothing, as a fresh install would.
    upgrade_to_head(url)
    assert schema_diff(url) == []
