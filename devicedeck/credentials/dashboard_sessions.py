"""Dashboard sign-ins kept on the server: the browser's cookie holds a random session id,
never the API token it signed in with.

Only the id's SHA-256 is stored (32 random bytes: nothing to brute-force). A session is alive
while nobody signed out, it was used within the idle timeout, it is younger than its maximum
age, and its token is not revoked. Every request checks all four in the database, so signing
out or revoking the token ends the session at once on every process that shares it.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session

from devicedeck.credentials.tokens import Principal, hash_token
from devicedeck.inventory.models import ApiToken, DashboardSession

SESSION_PREFIX = "dds_"
# Writing last_seen_at on every page view would turn every read into a write.
LAST_SEEN_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class SessionLimits:
    idle: timedelta
    max_age: timedelta

    @property
    def last_seen_resolution(self) -> timedelta:
        # A short idle timeout needs a finer record of use, or an active session would expire.
        return min(LAST_SEEN_RESOLUTION, self.idle / 10)


@dataclass(frozen=True)
class SessionAuthentication:
    principal: Principal
    # True when last_seen_at is older than its resolution and should be written.
    touch: bool


def _alive(now: datetime, limits: SessionLimits) -> tuple[Any, ...]:
    return (
        DashboardSession.ended_at.is_(None),
        DashboardSession.created_at > now - limits.max_age,
        DashboardSession.last_seen_at > now - limits.idle,
        ApiToken.revoked_at.is_(None),
    )


def start_session(session: Session, token_id: int, now: datetime, limits: SessionLimits) -> str:
    """A new session for the token; returns the id for the cookie, which is not kept."""
    # Sign-ins are rare: the moment to drop the rows of sessions that can never be used again.
    session.execute(
        delete(DashboardSession).where(
            or_(
                DashboardSession.ended_at.is_not(None),
                DashboardSession.created_at <= now - limits.max_age,
                DashboardSession.last_seen_at <= now - limits.idle,
            )
        )
    )
    plaintext = SESSION_PREFIX + secrets.token_urlsafe(32)
    session.add(
        DashboardSession(
            id_hash=hash_token(plaintext), token_id=token_id, created_at=now, last_seen_at=now
        )
    )
    session.flush()
    return plaintext


def authenticate_session(
    session: Session, plaintext: str, now: datetime, limits: SessionLimits
) -> SessionAuthentication | None:
    """Who a session cookie belongs to, or None if the session is over. Reads only."""
    row = session.execute(
        select(DashboardSession, ApiToken)
        .join(ApiToken, ApiToken.id == DashboardSession.token_id)
        .where(DashboardSession.id_hash == hash_token(plaintext), *_alive(now, limits))
    ).one_or_none()
    if row is None:
        return None
    signed_in, token = row
    return SessionAuthentication(
        principal=Principal.of_token(token, session_id=signed_in.id),
        touch=now - signed_in.last_seen_at >= limits.last_seen_resolution,
    )


def record_session_use(session: Session, session_id: int, token_id: int, now: datetime) -> None:
    session.execute(
        update(DashboardSession).where(DashboardSession.id == session_id).values(last_seen_at=now)
    )
    session.execute(update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=now))


def end_session(session: Session, plaintext: str, now: datetime) -> None:
    """Sign out: the session ends for every process at once. An unknown id changes nothing."""
    session.execute(
        update(DashboardSession)
        .where(DashboardSession.id_hash == hash_token(plaintext))
        .where(DashboardSession.ended_at.is_(None))
        .values(ended_at=now)
    )


def live_sessions(
    session: Session, ids: Collection[int], now: datetime, limits: SessionLimits
) -> set[int]:
    """Which of these sessions are still alive: one query for any number of them."""
    if not ids:
        return set()
    return set(
        session.scalars(
            select(DashboardSession.id)
            .join(ApiToken, ApiToken.id == DashboardSession.token_id)
            .where(DashboardSession.id.in_(ids), *_alive(now, limits))
        )
    )


def live_tokens(session: Session, ids: Collection[int]) -> set[int]:
    """Which of these tokens are not revoked (a deleted token is not alive either)."""
    if not ids:
        return set()
    return set(
        session.scalars(
            select(ApiToken.id).where(ApiToken.id.in_(ids), ApiToken.revoked_at.is_(None))
        )
    )
