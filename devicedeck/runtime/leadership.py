"""One process at a time does the work that must run once: the stale sweep and the cluster
watcher. Every replica and every worker of `devicedeck serve` serves requests; the one that
holds the lock also runs that work, and another takes over when it stops. With cluster
access the replicas elect with a Kubernetes Lease instead (devicedeck/kube/lease.py); this lock is
the election without one.

On PostgreSQL the lock is a session-level advisory lock held by a connection of its own: the
database releases it the moment that connection ends, whether the process stopped cleanly,
crashed or lost the network. On SQLite, where every process is on one host, it is an exclusive
file lock beside the database file, which the kernel releases when the process ends.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import psycopg
from sqlalchemy.engine import make_url

from devicedeck.db import libpq_url

log = logging.getLogger(__name__)

# pg_advisory_lock's key: any number no other part of the database uses ("DDLEADER" in ASCII).
LOCK_KEY = 0x44444C4541444552
# How often a follower tries the lock, and the leader checks its lock connection is alive.
RETRY_SECONDS = 2.0
CHECK_SECONDS = 5.0


class Election(Protocol):
    """Who runs the work that must run once: this lock, or a Lease (devicedeck/kube/lease.py)."""

    leading: bool

    async def run(self, work: Callable[[], Awaitable[None]]) -> None: ...


class Leadership:
    """Runs `work` while this process holds the lock; `leading` says whether it does now."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.leading = False

    async def run(self, work: Callable[[], Awaitable[None]]) -> None:
        if make_url(self.database_url).get_backend_name() == "postgresql":
            await self._run_with_advisory_lock(work)
        else:
            await self._run_with_file_lock(work)

    async def _run_with_advisory_lock(self, work: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    libpq_url(self.database_url), autocommit=True, connect_timeout=10
                ) as conn:
                    while not await _try_advisory_lock(conn):
                        await asyncio.sleep(RETRY_SECONDS)
                    await self._lead(work, lambda: _still_connected(conn))
            except psycopg.Error as e:
                log.warning(
                    "leader lock connection failed: %s; retrying",
                    e,
                    extra={"event": "leader_lock_unavailable"},
                )
            await asyncio.sleep(RETRY_SECONDS)

    async def _run_with_file_lock(self, work: Callable[[], Awaitable[None]]) -> None:
        path = _lock_path(self.database_url)
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as e:
                # The database's directory is missing or read-only: the database is unusable
                # too, and requests say so; try again later.
                log.warning(
                    "leader lock file %s cannot be opened: %s; retrying",
                    path,
                    e,
                    extra={"event": "leader_lock_unavailable"},
                )
                await asyncio.sleep(RETRY_SECONDS)
                continue
            try:
                while not _try_file_lock(fd):
                    await asyncio.sleep(RETRY_SECONDS)
                await self._lead(work, _always)
            finally:
                os.close(fd)  # releases the lock
            await asyncio.sleep(RETRY_SECONDS)

    async def _lead(
        self, work: Callable[[], Awaitable[None]], holds: Callable[[], Awaitable[bool]]
    ) -> None:
        """Runs work until it ends or the lock is lost, whichever comes first."""
        self.leading = True
        log.info(
            "leading: this process runs the stale sweep and the cluster watcher",
            extra={"event": "leading"},
        )
        task = asyncio.ensure_future(work())
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=CHECK_SECONDS)
                if not task.done() and not await holds():
                    log.warning(
                        "leader lock lost; stopping the work only the leader does",
                        extra={"event": "leadership_lost"},
                    )
                    break
        finally:
            self.leading = False
            await stop_work(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "leader work failed",
                exc_info=task.exception(),
                extra={"event": "leader_work_failed"},
            )


async def _try_advisory_lock(conn: psycopg.AsyncConnection[Any]) -> bool:
    cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,))
    row = await cursor.fetchone()
    return bool(row and row[0])


async def stop_work(task: asyncio.Task[None]) -> None:
    """Cancels the leader's work and waits for it to end. The work's cancellation ends here;
    the caller's own (a shutdown, arriving while the work was ending) goes on: swallowed, it
    would leave the caller electing for ever and the shutdown waiting on it."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        caller = asyncio.current_task()
        if caller is not None and caller.cancelling():
            raise


async def _still_connected(conn: psycopg.AsyncConnection[Any]) -> bool:
    try:
        # Not asyncio.wait_for: on Python 3.11 it returns the statement's result when its
        # caller is cancelled just as the statement ends, and the cancellation is lost.
        async with asyncio.timeout(CHECK_SECONDS):
            await conn.execute("SELECT 1")
    except (psycopg.Error, TimeoutError):
        return False
    return True


async def _always() -> bool:
    return True


def _lock_path(database_url: str) -> Path:
    database = make_url(database_url).database
    if not database or database == ":memory:":
        # An in-memory database belongs to one process: nothing to share the work with.
        return Path(os.devnull)
    return Path(f"{database}.leader")


def _try_file_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
