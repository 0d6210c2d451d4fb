"""Alembic migrations: upgrade an empty database, match the models, downgrade to nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

from devicedeck.db import create_db_engine
from devicedeck.inventory.models import DEVICES_FILLFACTOR, Base
from devicedeck.migrate import compares_on, downgrade_to_base, upgrade_to_head


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
            opts = {"compare_type": True, "include_object": compares_on(conn.dialect.name)}
            context = MigrationContext.configure(conn, opts=opts)
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
    if url.startswith("postgresql"):
        # Storage parameters are not among what the schema comparison compares.
        assert table_options(url, "devices") == [f"fillfactor={DEVICES_FILLFACTOR}"]


def table_options(url: str, table: str) -> list[str]:
    engine = create_db_engine(url)
    try:
        with engine.connect() as conn:
            query = text("SELECT reloptions FROM pg_class WHERE relname = :table")
            return list(conn.execute(query, {"table": table}).scalar_one() or [])
    finally:
        engine.dispose()


# Waits for the go file, so that every process starts migrating at the same moment.
MIGRATE_ON_SIGNAL = """
import sys, time
from pathlib import Path
from devicedeck.migrate import upgrade_to_head
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.01)
upgrade_to_head(sys.argv[1])
"""


def test_replicas_starting_together_each_migrate_without_failing(
    empty_database_url: str, tmp_path: Path
) -> None:
    """Two service replicas come up at once, each with its migrate init container (and
    `devicedeck serve` migrates at startup too): one migrates, the others find it done."""
    if not empty_database_url.startswith("postgresql"):
        pytest.skip("SQLite is one process's embedded database")
    go = tmp_path / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", MIGRATE_ON_SIGNAL, empty_database_url, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    go.touch()
    results = [(p.wait(timeout=300), p.stderr.read() if p.stderr else "") for p in processes]
    for process in processes:
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    assert [code for code, _ in results] == [0, 0, 0, 0], "\n".join(e for _, e in results)
    assert schema_diff(empty_database_url) == []
