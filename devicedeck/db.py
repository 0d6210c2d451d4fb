"""Engine and session factory.

SQLite gets WAL, foreign keys and a busy timeout. Its transactions begin DEFERRED by default;
a writer asks for ``write_session`` so the transaction begins IMMEDIATE, because a deferred
transaction that reads first and writes later fails at once with SQLITE_BUSY when another
writer committed in between. Writers in one process also queue on a lock before they begin:
SQLite's own busy handler retries with sleeps of up to 100 ms, which left some snapshots
waiting for a second behind others that took a few milliseconds.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session, sessionmaker

IMMEDIATE = "devicedeck_immediate"

_sqlite_writer_locks: weakref.WeakKeyDictionary[Engine, threading.RLock] = (
    weakref.WeakKeyDictionary()
)


def is_postgresql(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


def create_db_engine(url: str, **kwargs: Any) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs
        )
        _configure_sqlite(engine)
        return engine
    if "poolclass" not in kwargs:
        kwargs.setdefault("pool_size", 10)
        kwargs.setdefault("max_overflow", 20)
    kwargs.setdefault("pool_pre_ping", True)
    # JIT compiles a plan whose estimated cost is high (a count or aggregate over a large
    # fleet): 0.3-1 s of compiling for queries that run in milliseconds.
    kwargs.setdefault("connect_args", {"options": "-c jit=off"})
    return create_engine(url, **kwargs)


class EventLoopDatabase:
    """PostgreSQL through its async driver, for ingest work small enough to run in the event
    loop: one Python thread does it all, where worker threads would hand the GIL back and forth
    at every database round trip.

    `statements` serves the one-statement unchanged-snapshot check, a transaction of its own,
    from a psycopg pool of autocommit connections: for that one statement, checking out and
    returning a connection through SQLAlchemy cost about a quarter of the request's CPU.
    `sessions` serves the full path, one transaction per snapshot. Neither checks a pooled
    connection before use, which would add a round trip to every snapshot. A check that meets a
    dropped connection leaves the snapshot to the full path; the full path, when it meets one,
    goes to the synchronous engine, which checks its connections first.
    """

    def __init__(self, url: str) -> None:
        self.statements: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
            libpq_url(url),
            min_size=1,
            max_size=20,
            open=False,
            kwargs={"autocommit": True},
            name="unchanged-snapshots",
        )
        self.transactional = create_async_engine(url, pool_size=10, max_overflow=10)
        self.sessions = async_sessionmaker(self.transactional, expire_on_commit=False)

    async def open(self) -> None:
        """Starts the pool; its connections are made in the background, and a database that
        is down now only delays them."""
        await self.statements.open(wait=False)

    async def dispose(self) -> None:
        await self.statements.close()
        await self.transactional.dispose()


def create_event_loop_database(url: str) -> EventLoopDatabase | None:
    """None where the database has no async driver here (SQLite)."""
    if make_url(url).get_backend_name() != "postgresql":
        return None
    return EventLoopDatabase(url)


def _configure_sqlite(engine: Engine) -> None:
    _sqlite_writer_locks[engine] = threading.RLock()

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy emit BEGIN itself so we can choose DEFERRED or IMMEDIATE.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.get_execution_options().get(IMMEDIATE):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


def libpq_url(database_url: str) -> str:
    """The SQLAlchemy URL as a libpq URI psycopg accepts (drops the +driver part)."""
    url = make_url(database_url)
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def write_session(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose transaction takes the write lock at once and commits on success."""
    writers = _sqlite_writer_locks.get(factory.kw["bind"])
    with writers or nullcontext(), factory() as session:
        session.connection(execution_options={IMMEDIATE: True})
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
