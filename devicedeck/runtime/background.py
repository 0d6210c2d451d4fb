"""The service's background tasks: who owns them, and the stale sweep.

`create_app` starts them in its lifespan and stops them at shutdown; other parts (the dashboard's
live updates, the cluster watcher) add starters, `(app, tasks) -> None`, to
`devicedeck.state.background_starters`, and are given this module's `BackgroundTasks`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

from fastapi import FastAPI

from devicedeck.clock import utcnow
from devicedeck.config import Settings
from devicedeck.db import write_session
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.inventory.write.staleness import mark_stale_nodes
from devicedeck.runtime.fleet_metrics import renew_fleet_gauges
from devicedeck.runtime.leadership import Election, Leadership

log = logging.getLogger(__name__)


def clock_of(settings: Settings) -> Freshness:
    return Freshness(now=utcnow(), stale_after=timedelta(seconds=settings.stale_after))


def start_background_tasks(app: FastAPI) -> BackgroundTasks:
    """Every registered starter's tasks, owned by one BackgroundTasks; the ones that must run
    once run while this process leads (devicedeck/runtime/leadership.py)."""
    background = BackgroundTasks()
    for starter in app.state.background_starters:
        starter(app, background)
    # A starter may have chosen the election (a Lease, with cluster access); else the database.
    leadership = background.election or Leadership(app.state.settings.database_url)
    app.state.leadership = leadership
    app.state.metrics.watch_leadership(lambda: leadership.leading)
    background.start(leadership.run(background.run_once_only), name="leadership")
    app.state.background = background
    return background


def start_stale_sweep(app: FastAPI, tasks: BackgroundTasks) -> None:
    """Background starter of the stale sweep, which create_app registers first; one process
    among all replicas and workers sweeps."""
    tasks.start_once(lambda: stale_sweep(app, app.state.settings), name="stale-sweep")


def start_fleet_gauge_renewal(app: FastAPI, tasks: BackgroundTasks) -> None:
    """Background starter of the fleet gauges' renewal, in every process: each answers its
    own scrapes."""
    fleet = app.state.metrics.fleet
    if fleet is not None and fleet.refresh > 0:
        tasks.start(renew_fleet_gauges(fleet), name="fleet-gauges")


class BackgroundTasks:
    """Owns the app's background tasks and cancels them at shutdown.

    Tasks given to start_once run only while this process leads: among all replicas and
    workers on one database, one runs them at a time.
    """

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []
        self.once_only: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {}
        self.election: Election | None = None
        self.closers: list[Callable[[], None]] = []

    def elect_with(self, election: Election) -> None:
        """Decide who runs the once-only tasks with this election instead of the database
        lock."""
        self.election = election

    def at_stop(self, close: Callable[[], None]) -> None:
        """Call close at shutdown, after every task (the leader's last writes too) ended."""
        self.closers.append(close)

    def start(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self.tasks.append(asyncio.create_task(coro, name=name))

    def start_once(self, make: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self.once_only[name] = make

    async def run_once_only(self) -> None:
        """Runs every once-only task until cancelled (leadership lost, or shutdown)."""
        tasks = [asyncio.create_task(make(), name=name) for name, make in self.once_only.items()]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                # Once only: a task already cancelled may be awaiting its own cleanup (the
                # watcher stopping its threads), which a second cancel would cut short.
                if not task.done() and not task.cancelling():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # Cancelling a task does not stop the thread of an asyncio.to_thread call it awaited;
        # wait for those threads, so none holds a database connection when the engine is
        # disposed (it would leak, never to be closed).
        try:
            await asyncio.wait_for(asyncio.get_running_loop().shutdown_default_executor(), 30)
        except TimeoutError:
            log.warning(
                "background threads still running at shutdown after 30 s",
                extra={"event": "background_threads_not_stopped"},
            )
        for close in self.closers:
            close()


async def stale_sweep(app: FastAPI, settings: Settings) -> None:
    interval = max(1.0, settings.stale_after / 3)
    while True:
        await asyncio.sleep(interval)
        try:
            await asyncio.to_thread(_sweep_once, app, settings)
        except Exception:
            log.exception("stale sweep failed; will retry", extra={"event": "stale_sweep_failed"})


def _sweep_once(app: FastAPI, settings: Settings) -> None:
    clock = clock_of(settings)
    with write_session(app.state.session_factory) as session:
        names = mark_stale_nodes(session, clock.now, clock.cutoff)
    if names:
        log.info(
            "nodes turned stale",
            extra={
                "event": "nodes_turned_stale",
                "count": len(names),
                "names": ",".join(names[:20]),
            },
        )
