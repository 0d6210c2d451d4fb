"""Settings, database sessions and the query clock, as route dependencies."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.config import Settings
from devicedeck.db import is_postgresql
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.web.state import service_state


async def get_settings(request: Request) -> Settings:
    return service_state(request.app).settings


async def get_session_factory(request: Request) -> sessionmaker[Session]:
    return service_state(request.app).session_factory


def read_session(
    factory: Annotated[sessionmaker[Session], Depends(get_session_factory)],
) -> Iterator[Session]:
    """A session whose reads all see one moment of the database.

    A page reads a device's health and its history in separate statements. PostgreSQL's default
    isolation takes a new snapshot per statement, so an ingest committing in between could show
    the new health beside the old history. SQLite's deferred transaction already reads from one
    snapshot. Read-only, so a read route that tried to write would fail loudly.
    """
    with factory() as session:
        if is_postgresql(factory.kw["bind"]):
            session.connection(
                execution_options={
                    "isolation_level": "REPEATABLE READ",
                    "postgresql_readonly": True,
                }
            )
        yield session


async def query_clock(settings: Annotated[Settings, Depends(get_settings)]) -> Freshness:
    return Freshness(now=utcnow(), stale_after=timedelta(seconds=settings.stale_after))


ReadSession = Annotated[Session, Depends(read_session)]
SessionFactory = Annotated[sessionmaker[Session], Depends(get_session_factory)]
CurrentSettings = Annotated[Settings, Depends(get_settings)]
QueryClock = Annotated[Freshness, Depends(query_clock)]
