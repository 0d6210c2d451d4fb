"""Live updates: notice new events in the database and wake every open event stream.

One watcher task per service process. On PostgreSQL it LISTENs on the channel the ingest
transaction notifies at commit, so a change written by any process reaches the pages every
process serves. On SQLite (one process) it polls the newest event id once a second. Bursts
are coalesced: subscribers hear at most one change per THROTTLE seconds, and only the newest
event id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any

import psycopg
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from app.db import is_postgresql, libpq_url
from app.inventory.events import NOTIFY_CHANNEL
from app.inventory.history import latest_event_id
from app.retry import Backoff

log = logging.getLogger(__name__)

POLL_INTERVAL = 1.0
THROTTLE = 0.5
RECONNECT_MIN = 0.5
RECONNECT_MAX = 30.0
# Every replica loses its connection when the database restarts: do not reconnect in step.
RECONNECT_JITTER = 0.2
HEARTBEAT = 30.0
CLOSED = -1  # what a subscriber's queue holds once the hub has closed


class LiveHub:
    """Fans the newest event id out to subscribers; closing it ends every stream."""

    def __init__(self, latest: int = 0) -> None:
        self.latest = latest
        self.closed = asyncio.Event()
        self._subscribers: set[asyncio.Queue[int]] = set()
        self._loop = asyncio.get_running_loop()

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def publish(self, latest: int) -> None:
        self.latest = max(self.latest, latest)
        for queue in self._subscribers:
            put_newest(queue, self.latest)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[int]]:
        """A queue that holds the newest event id, or CLOSED once the hub closes."""
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
        if self.closed.is_set():
            queue.put_nowait(CLOSED)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)

    def close(self) -> None:
        self.closed.set()
        for queue in self._subscribers:
            put_newest(queue, CLOSED)

    def close_threadsafe(self) -> None:
        """For code outside the event loop (signal handlers, a server run in a thread)."""
        self._loop.call_soon_threadsafe(self.close)


def put_newest(queue: asyncio.Queue[int], value: int) -> None:
    """Subscribers only care about the newest id: replace what they have not read yet."""
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(value)


def read_latest(factory: sessionmaker[Session]) -> int:
    with factory() as session:
        return latest_event_id(session)


async def poll_latest(hub: LiveHub, factory: sessionmaker[Session]) -> None:
    """SQLite: one process writes and reads, so asking for the newest id is enough."""
    while True:
        try:
            latest = await asyncio.to_thread(read_latest, factory)
        except Exception:
            log.exception("reading the newest event id failed; will retry")
        else:
            if latest != hub.latest:
                hub.publish(latest)
        await asyncio.sleep(POLL_INTERVAL)


async def listen_for_events(hub: LiveHub, factory: sessionmaker[Session], conninfo: str) -> None:
    """PostgreSQL: LISTEN on the channel; each notification wakes the publisher."""
    wake = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        group.create_task(_publish_on_wake(hub, factory, wake))
        await _listen(conninfo, wake)


async def _connect(conninfo: str) -> psycopg.AsyncConnection[Any]:
    """Connect; if cancelled half-way, finish and close the connection before giving up, so
    no open connection is left for the garbage collector (a ResourceWarning, and a leak)."""
    connecting = asyncio.ensure_future(
        psycopg.AsyncConnection.connect(conninfo, autocommit=True, connect_timeout=10)
    )
    try:
        return await asyncio.shield(connecting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            conn = await asyncio.wait_for(connecting, timeout=10)
            await conn.close()
        raise


async def _listen(conninfo: str, wake: asyncio.Event) -> None:
    """Reconnects with backoff when the connection drops, and wakes the publisher after each
    (re)connect in case a change came while it was down. A quiet connection is checked every
    HEARTBEAT seconds so a dead one is noticed."""
    backoff = Backoff(RECONNECT_MIN, RECONNECT_MAX, jitter=RECONNECT_JITTER)
    while True:
        try:
            async with await _connect(conninfo) as conn:
                await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                backoff.reset()
                wake.set()
                while True:
                    async for _ in conn.notifies(timeout=HEARTBEAT):
                        wake.set()
                    await conn.execute("SELECT 1")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            delay = backoff.next_delay()
            log.warning("event listener lost its connection", extra={"error": e, "retry_in": delay})
            await asyncio.sleep(delay)


async def _publish_on_wake(
    hub: LiveHub, factory: sessionmaker[Session], wake: asyncio.Event
) -> None:
    """Coalesces bursts: one read of the newest id per wake-up, at most one per THROTTLE."""
    while True:
        await wake.wait()
        wake.clear()
        try:
            hub.publish(await asyncio.to_thread(read_latest, factory))
        except Exception:
            log.exception("reading the newest event id failed; will retry on the next change")
        await asyncio.sleep(THROTTLE)


def end_streams_on_signals(hub: LiveHub) -> None:
    """End open event streams as soon as a shutdown signal arrives.

    The server waits for open responses to finish before it shuts the application down, and
    an event stream never finishes by itself; so the handler the server installed is wrapped
    to close the hub first. Only the main thread can handle signals, and only a callable
    handler (the server's) is wrapped.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)
        if callable(previous):
            signal.signal(signum, _chained(hub, previous))


def _chained(hub: LiveHub, previous: Callable[[int, FrameType | None], Any]) -> Any:
    def handler(signum: int, frame: FrameType | None) -> None:
        hub.close_threadsafe()
        previous(signum, frame)

    return handler


def start_live_updates(app: FastAPI, tasks: Any) -> None:
    """Background starter (see app.main): the hub, its watcher, and the signal hook."""
    factory: sessionmaker[Session] = app.state.session_factory
    hub = LiveHub(read_latest(factory))
    app.state.live = hub
    if is_postgresql(app.state.engine):
        conninfo = libpq_url(app.state.settings.database_url)
        tasks.start(_closing(hub, listen_for_events(hub, factory, conninfo)), name="live-listen")
    else:
        tasks.start(_closing(hub, poll_latest(hub, factory)), name="live-poll")
    end_streams_on_signals(hub)


async def _closing(hub: LiveHub, watcher: Any) -> None:
    try:
        await watcher
    finally:
        hub.close()
