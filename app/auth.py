"""API tokens: created once and shown once, kept only as SHA-256 hashes, checked by scope.

Tokens are 32 random bytes, so a plain SHA-256 is enough: there is nothing to brute-force.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.inventory.errors import InvalidInput, NotFound, Problem
from app.inventory.models import ApiToken

SCOPES = ("read", "ingest", "admin")
TOKEN_PREFIX = "ddk_"
# Writing last_used_at on every request would turn every read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's name and scopes, or the local demo user when auth is off."""

    name: str
    scopes: frozenset[str]

    def has(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes


ANONYMOUS_ADMIN = Principal(name="anonymous (auth off)", scopes=frozenset(SCOPES))


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    session: Session, name: str, scopes: list[str], now: datetime
) -> tuple[ApiToken, str]:
    problems = []
    if not name or len(name) > 100:
        problems.append(Problem("name", "length", "must be 1 to 100 characters"))
    elif not name.isprintable():
        problems.append(Problem("name", "printable", "must be printable characters only"))
    if not scopes:
        problems.append(Problem("scope", "required", f"give at least one of {', '.join(SCOPES)}"))
    for scope in scopes:
        if scope not in SCOPES:
            problems.append(
                Problem("scope", "enum", f"{scope!r} is not one of {', '.join(SCOPES)}")
            )
    # Only a well-formed name is looked up: PostgreSQL refuses a NUL even in a query.
    taken = select(ApiToken.id).where(ApiToken.name == name)
    if not problems and session.scalars(taken).first() is not None:
        problems.append(Problem("name", "unique", f"a token named {name!r} exists already"))
    if problems:
        raise InvalidInput("cannot create token", problems)
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        name=name,
        token_hash=hash_token(plaintext),
        scopes=sorted(set(scopes)),
        created_at=now,
    )
    session.add(token)
    session.flush()
    return token, plaintext


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.name)))


def revoke_token(session: Session, name: str, now: datetime) -> ApiToken:
    token = session.scalars(select(ApiToken).where(ApiToken.name == name)).one_or_none()
    if token is None:
        raise NotFound(f"no token named {name!r}")
    if token.revoked_at is None:
        token.revoked_at = now
    return token


@dataclass(frozen=True)
class Authentication:
    principal: Principal
    token_id: int
    # True when last_used_at is older than its resolution and should be written.
    touch: bool


def authenticate(session: Session, plaintext: str, now: datetime) -> Authentication | None:
    """Who a presented token belongs to, or None if it is unknown or revoked. Reads only."""
    token = session.scalars(
        select(ApiToken).where(ApiToken.token_hash == hash_token(plaintext))
    ).one_or_none()
    if token is None or token.revoked_at is not None:
        return None
    touch = token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION
    return Authentication(
        principal=Principal(name=token.name, scopes=frozenset(token.scopes)),
        token_id=token.id,
        touch=touch,
    )


def record_token_use(session: Session, token_id: int, now: datetime) -> None:
    session.execute(update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=now))


class TokenCache:
    """Tokens that authenticated recently, so that a busy agent's requests skip the database.

    Keyed by the token's hash, never the token. Only successes are kept: unknown tokens would
    let anyone fill the memory. A revocation through this process clears the cache at once;
    one made elsewhere (the CLI, another replica) takes effect within `ttl` seconds, and a
    `ttl` of 0 turns the cache off.
    """

    MAX_ENTRIES = 10_000

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._entries: dict[str, tuple[Principal, float]] = {}

    def get(self, plaintext: str) -> Principal | None:
        key = hash_token(plaintext)
        entry = self._entries.get(key)
        if entry is None:
            return None
        principal, expires = entry
        if self._clock() >= expires:
            del self._entries[key]
            return None
        return principal

    def put(self, plaintext: str, principal: Principal) -> None:
        if self.ttl <= 0:
            return
        if len(self._entries) >= self.MAX_ENTRIES:
            self._entries.clear()
        self._entries[hash_token(plaintext)] = (principal, self._clock() + self.ttl)

    def forget(self, name: str) -> None:
        """Drop the named token (names are unique), as its revocation must apply at once."""
        self._entries = {k: v for k, v in self._entries.items() if v[0].name != name}
