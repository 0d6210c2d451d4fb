"""Statements and round trips as the database drivers send them, on every connection.

SQLAlchemy's events see only what goes through SQLAlchemy; ingest also sends statements on the
driver's own pooled connections (the unchanged-snapshot statement, the two-round-trip
transactions). Here every psycopg connection opened while a `DriverTrace` is installed writes
libpq's protocol trace to a file of its own, and every sqlite3 connection reports what its
cursors are asked to execute, and its commits and rollbacks. A statement is an Execute
(extended protocol) or a Query (simple protocol) message; a round trip is a run of messages to
the server followed by the server's answer, which in the extended protocol comes only after the
client's Sync or Flush. SQLite runs in the process and has no round trips.

Connections are named by what opens them: `driver` for psycopg's pool of the driver's own
connections, `session` for SQLAlchemy's async engine (the full path in the event loop),
`engine` for SQLAlchemy's engine (worker threads, token checks, reads), `sqlite` for SQLite.
The leader lock's connection, whose checks run on a timer, is not traced.
"""

from __future__ import annotations

import re
import sqlite3
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psycopg
import pytest
from psycopg.pq import Trace

# One protocol message of libpq's trace (timestamps suppressed): direction, length, type.
_MESSAGE = re.compile(r"^([FB])\t\d+\t(\w+)\t?(.*)$")
_PARSE = re.compile(r'^ "(?P<name>[^"]*)" "(?P<sql>.*)" \d+(?: \S+)*$', re.DOTALL)
_BIND = re.compile(r'^ "[^"]*" "(?P<name>[^"]*)"')
_QUERY = re.compile(r'^ "(?P<sql>.*)"$', re.DOTALL)


@dataclass
class Sent:
    """One statement: the connection that sent it, and its SQL."""

    connection: str
    sql: str

    @property
    def verb(self) -> str:
        """The statement's first word, upper case: what a baseline records of it."""
        words = self.sql.split(None, 1)
        return words[0].upper().rstrip(";") if words else ""

    def __str__(self) -> str:
        return f"{self.connection}: {self.verb}"


@dataclass
class Measured:
    """What the drivers sent while a `DriverTrace.measure()` block ran."""

    statements: list[Sent] = field(default_factory=list)
    round_trips: int = 0

    def described(self) -> list[str]:
        return [str(sent) for sent in self.statements]


class _PsycopgConnection:
    """One psycopg connection's trace file, read from where the last measurement stopped."""

    def __init__(self, name: str, path: Path, stream: IO[bytes]) -> None:
        self.name = name
        self.path = path
        self.stream = stream  # kept open: libpq writes through its own copy of the descriptor
        self.offset = 0
        self.prepared: dict[str, str] = {}
        self.unnamed = ""
        self.bound = ""

    def skip(self) -> None:
        self.offset = self.path.stat().st_size

    def read(self, into: Measured) -> None:
        with self.path.open("rb") as trace:
            trace.seek(self.offset)
            text = trace.read()
        # Only whole messages: libpq writes a message's line at once, so a partial last line is
        # a message still being written, read next time.
        end = text.rfind(b"\n") + 1
        self.offset += end
        messages: list[list[str]] = []
        for line in text[:end].decode("utf-8", "replace").split("\n")[:-1]:
            if _MESSAGE.match(line) or not messages:
                messages.append([line])
            else:
                messages[-1].append(line)  # a statement's SQL runs over several lines
        last = "B"
        for lines in messages:
            found = _MESSAGE.match(lines[0])
            if found is None:
                continue
            direction, kind, rest = found.groups()
            rest = "\n".join([rest, *lines[1:]])
            if direction == "B":
                if last == "F":
                    into.round_trips += 1
                last = "B"
                continue
            last = "F"
            self._sent(kind, rest, into)

    def _sent(self, kind: str, rest: str, into: Measured) -> None:
        if kind == "Parse":
            parsed = _PARSE.match(rest)
            sql = parsed["sql"] if parsed else rest
            if parsed and parsed["name"]:
                self.prepared[parsed["name"]] = sql
            else:
                self.unnamed = sql
        elif kind == "Bind":
            bound = _BIND.match(rest)
            name = bound["name"] if bound else ""
            self.bound = self.prepared.get(name, "") if name else self.unnamed
        elif kind == "Execute":
            into.statements.append(Sent(self.name, self.bound))
        elif kind == "Query":
            query = _QUERY.match(rest)
            into.statements.append(Sent(self.name, query["sql"] if query else rest))


class DriverTrace:
    """Installed with `install`, traces every database connection opened from then on;
    `measure()` tells what they sent during its block."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._psycopg: list[_PsycopgConnection] = []
        self._sqlite: list[Sent] = []
        self._sqlite_seen = 0
        self._lock = threading.Lock()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        connect = psycopg.Connection.connect
        connect_async = psycopg.AsyncConnection.connect
        connect_sqlite = sqlite3.connect

        def traced(*args: Any, **kwargs: Any) -> psycopg.Connection[Any]:
            connection = connect(*args, **kwargs)
            self._trace(connection.pgconn, "engine")
            return connection

        async def traced_async(*args: Any, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
            opener = _caller_module()
            connection = await connect_async(*args, **kwargs)
            if opener.startswith("psycopg_pool"):
                self._trace(connection.pgconn, "driver")
            elif opener.startswith("sqlalchemy"):
                self._trace(connection.pgconn, "session")
            # Any other (the leader lock's connection, whose checks run on a timer) is not
            # ingest's, and not traced.
            return connection

        sent = self._sqlite_statement

        class Cursor(sqlite3.Cursor):
            def execute(self, sql: str, parameters: Any = (), /) -> Cursor:
                sent(sql)
                return super().execute(sql, parameters)

            def executemany(self, sql: str, parameters: Any, /) -> Cursor:
                sent(sql)
                return super().executemany(sql, parameters)

        class Connection(sqlite3.Connection):
            def cursor(self, factory: Any = Cursor) -> Any:
                return super().cursor(factory)

            def commit(self) -> None:
                if self.in_transaction:
                    sent("COMMIT")
                super().commit()

            def rollback(self) -> None:
                if self.in_transaction:
                    sent("ROLLBACK")
                super().rollback()

        def traced_sqlite(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            # sqlite3's own trace callback repeats a statement for each trigger it fires.
            return connect_sqlite(*args, **kwargs, factory=Connection)

        # SQLAlchemy's engine calls the module's connect; its async engine and psycopg's pool
        # call the class's.
        monkeypatch.setattr(psycopg, "connect", traced)
        monkeypatch.setattr(psycopg.Connection, "connect", traced)
        monkeypatch.setattr(psycopg.AsyncConnection, "connect", traced_async)
        monkeypatch.setattr(sqlite3, "connect", traced_sqlite)
        monkeypatch.setattr(sqlite3.dbapi2, "connect", traced_sqlite)

    def close(self) -> None:
        for connection in self._psycopg:
            connection.stream.close()

    def _trace(self, pgconn: Any, name: str) -> None:
        with self._lock:
            path = self.directory / f"connection-{len(self._psycopg)}.trace"
            stream = path.open("wb", buffering=0)
            self._psycopg.append(_PsycopgConnection(name, path, stream))
        pgconn.trace(stream.fileno())
        pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)

    def _sqlite_statement(self, sql: str) -> None:
        with self._lock:
            self._sqlite.append(Sent("sqlite", sql))

    @contextmanager
    def measure(self) -> Iterator[Measured]:
        """What the drivers send during the block; what they sent before it is not counted.
        Statements are listed connection by connection, each connection's in order."""
        _flush_c_streams()
        with self._lock:
            connections = list(self._psycopg)
            self._sqlite_seen = len(self._sqlite)
        for connection in connections:
            connection.skip()
        measured = Measured()
        yield measured
        _flush_c_streams()
        with self._lock:
            measured.statements.extend(self._sqlite[self._sqlite_seen :])
            connections = list(self._psycopg)
        for connection in connections:
            connection.read(measured)


def _caller_module() -> str:
    """The module of the code that called the function that calls this."""
    frame = sys._getframe(2)
    return str(frame.f_globals.get("__name__", ""))


def _flush_c_streams() -> None:
    """libpq writes its trace through the C library's buffered streams."""
    import ctypes

    ctypes.CDLL(None).fflush(None)
