"""Shared fixtures: every database test runs on SQLite and on PostgreSQL.

PostgreSQL: one database per pytest process, migrated once, emptied after each test.
SQLite: one migrated template file per process, copied for each test.
Set DEVICEDECK_REQUIRE_POSTGRES=1 (make test and CI do) to fail instead of skip when
PostgreSQL is unreachable.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, Settings
from devicedeck.credentials.tokens import create_token
from devicedeck.db import create_db_engine, make_session_factory, write_session
from devicedeck.inventory.models import Base
from devicedeck.main import create_app
from devicedeck.migrate import upgrade_to_head

POSTGRES_ADMIN_URL = os.environ.get(
    "DEVICEDECK_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REQUIRE_POSTGRES = os.environ.get("DEVICEDECK_REQUIRE_POSTGRES") == "1"


def _libpq(url: str) -> str:
    parsed = make_url(url)
    parts = [f"host={parsed.host or '127.0.0.1'}", f"port={parsed.port or 5432}"]
    parts.append(f"user={parsed.username or 'postgres'}")
    if parsed.password:
        parts.append(f"password={parsed.password}")
    parts.append(f"dbname={parsed.database or 'postgres'}")
    return " ".join(parts)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    name = f"devicedeck_test_{os.getpid()}"
    try:
        admin = psycopg.connect(_libpq(POSTGRES_ADMIN_URL), autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        if REQUIRE_POSTGRES:
            pytest.fail(f"PostgreSQL is required but unreachable at {POSTGRES_ADMIN_URL}: {e}")
        pytest.skip(f"PostgreSQL unreachable at {POSTGRES_ADMIN_URL}")
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    upgrade_to_head(url)
    yield url
    with psycopg.connect(_libpq(POSTGRES_ADMIN_URL), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.db"
    upgrade_to_head(f"sqlite:///{path}")
    return path


def _empty_postgres(url: str) -> None:
    engine = create_db_engine(url)
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        target = tmp_path / "devicedeck.db"
        shutil.copy(template, target)
        yield f"sqlite:///{target}"
        return
    url: str = request.getfixturevalue("postgres_url")
    # Emptied before each test, not after: the next test empties it anyway, and the session
    # drops the whole database at the end.
    _empty_postgres(url)
    yield url


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_db_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def session_factory(engine: Engine) -> sessionmaker[Session]:
    return make_session_factory(engine)


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, auth=AuthMode.TOKEN, stale_after=90)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


MakeToken = Callable[..., str]


@pytest.fixture
def make_token(session_factory: sessionmaker[Session]) -> MakeToken:
    counter = iter(range(1_000_000))

    def make(*scopes: str, name: str | None = None, node: str | None = None) -> str:
        """An ingest token is bound to `node`, or without one writes every node."""
        with write_session(session_factory) as session:
            _, plaintext = create_token(
                session,
                name or f"token-{next(counter)}",
                list(scopes),
                utcnow(),
                node=node,
                all_nodes=node is None and "ingest" in scopes,
            )
        return plaintext

    return make


@pytest.fixture
def auth(make_token: MakeToken) -> dict[str, str]:
    """Headers of a token with every scope."""
    return {"Authorization": f"Bearer {make_token('read', 'ingest', 'admin', name='tester')}"}
