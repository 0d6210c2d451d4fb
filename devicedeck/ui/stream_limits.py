"""Who holds the open event streams: at most so many per credential, and each one ended when
the token behind it is revoked or its dashboard session ends.

A stream is owned by the dashboard session it came with, else by its token, else (a
ServiceAccount or a proxy-vouched user) by its name, else (auth off) by the client's address.
The limit is per serving process: each replica counts its own streams. One task per process
checks the open streams' sessions and tokens in the database every
DEVICEDECK_STREAM_CHECK_SECONDS, with one query for all sessions and one for all tokens, however
many streams are open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.config import Settings
from devicedeck.credentials.dashboard_sessions import SessionLimits, live_sessions, live_tokens
from devicedeck.credentials.tokens import Principal
from devicedeck.ui.live import CLOSED, put_newest
from devicedeck.web.principal import session_limits

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamOwner:
    kind: str  # "session", "token", "name" or "address"
    key: str | int

    def describe(self) -> str:
        return {
            "session": "this dashboard session",
            "token": "this token",
            "name": "this user",
            "address": "this address",
        }[self.kind]


def owner_of(principal: Principal, client_host: str | None) -> StreamOwner:
    if principal.session_id is not None:
        return StreamOwner("session", principal.session_id)
    if principal.token_id is not None:
        return StreamOwner("token", principal.token_id)
    if principal.anonymous:
        return StreamOwner("address", client_host or "")
    return StreamOwner("name", principal.name)


class TooManyStreams(Exception):
    def __init__(self, owner: StreamOwner, limit: int) -> None:
        super().__init__(
            f"{owner.describe()} already has {limit} live update streams open, the most "
            "allowed (DEVICEDECK_MAX_LIVE_STREAMS); close a dashboard tab and try again"
        )


class StreamSlot:
    """One open stream's place: ending it wakes the stream with CLOSED, and it stops."""

    def __init__(self) -> None:
        self.ended = False
        self._queue: asyncio.Queue[int] | None = None

    def attach(self, queue: asyncio.Queue[int]) -> None:
        self._queue = queue
        if self.ended:
            put_newest(queue, CLOSED)

    def end(self) -> None:
        self.ended = True
        if self._queue is not None:
            put_newest(self._queue, CLOSED)


class LiveStreams:
    """The open streams of this process, by owner."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[StreamOwner, set[StreamSlot]] = {}

    def count(self, owner: StreamOwner) -> int:
        return len(self._open.get(owner, ()))

    @contextmanager
    def hold(self, owner: StreamOwner) -> Iterator[StreamSlot]:
        """A slot for one more stream of `owner`, or TooManyStreams; freed on exit."""
        slots = self._open.setdefault(owner, set())
        if len(slots) >= self.limit:
            raise TooManyStreams(owner, self.limit)
        slot = StreamSlot()
        slots.add(slot)
        try:
            yield slot
        finally:
            slots.discard(slot)
            if not slots:
                del self._open[owner]

    def owners(self) -> set[StreamOwner]:
        return set(self._open)

    def end(self, owner: StreamOwner) -> None:
        for slot in self._open.get(owner, ()):
            slot.end()


def owners_gone(
    factory: sessionmaker[Session],
    owners: set[StreamOwner],
    now: datetime,
    limits: SessionLimits,
) -> set[StreamOwner]:
    """The owners whose session has ended or whose token is revoked."""
    sessions = {int(o.key) for o in owners if o.kind == "session"}
    tokens = {int(o.key) for o in owners if o.kind == "token"}
    with factory() as session:
        alive_sessions = live_sessions(session, sessions, now, limits)
        alive_tokens = live_tokens(session, tokens)
    return {
        o
        for o in owners
        if (o.kind == "session" and o.key not in alive_sessions)
        or (o.kind == "token" and o.key not in alive_tokens)
    }


async def end_streams_of_the_gone(
    streams: LiveStreams,
    factory: sessionmaker[Session],
    limits: SessionLimits,
    interval: float,
) -> None:
    while True:
        await asyncio.sleep(interval)
        checked = {o for o in streams.owners() if o.kind in ("session", "token")}
        if not checked:
            continue
        try:
            gone = await asyncio.to_thread(owners_gone, factory, checked, utcnow(), limits)
        except Exception:
            log.exception(
                "checking the live streams' sessions and tokens failed; will retry",
                extra={"event": "stream_check_failed"},
            )
            continue
        for owner in gone:
            streams.end(owner)


def start_stream_checks(app: Any, tasks: Any) -> None:
    """Background starter (see devicedeck.main): the check of open streams, on every process."""
    settings: Settings = app.state.settings
    tasks.start(
        end_streams_of_the_gone(
            app.state.live_streams,
            app.state.session_factory,
            session_limits(settings),
            settings.stream_check_seconds,
        ),
        name="live-stream-checks",
    )
