"""Live updates: notice new events in the database and wake every open event stream.

One watcher task per service process polls the newest event id once a second, so a change
written by any process (any replica) reaches the pages every process serves. Subscribers hear
only the newest id.

Not LISTEN/NOTIFY on PostgreSQL: a transaction that notifies takes one database-wide lock at
commit and holds it until its commit is flushed, so every writer of events waited for every
other's flush in turn. At a few hundred snapshots a second that lock, not the CPU, set the
ingest rate. The poll is one read of the events' primary key index a second per process.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any

from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.inventory.read.history import latest_event_id

log = logging.getLogger(__name__)

POLL_INTERVAL = 1.0
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
    while True:
        try:
            latest = await asyncio.to_thread(read_latest, factory)
        except Exception:
            log.exception(
                "reading the newest event id failed; will retry",
                extra={"event": "newest_event_read_failed"},
            )
        else:
            if latest != hub.latest:
                hub.publish(latest)
        await asyncio.sleep(POLL_INTERVAL)


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
    """Background starter (see devicedeck.main): the hub, its watcher, and the signal hook."""
    factory: sessionmaker[Session] = app.state.session_factory
    hub = LiveHub(read_latest(factory))
    app.state.live = hub
    tasks.start(_closing(hub, poll_latest(hub, factory)), name="live-poll")
    end_streams_on_signals(hub)


async def _closing(hub: LiveHub, watcher: Any) -> None:
    try:
        await watcher
    finally:
        hub.close()
