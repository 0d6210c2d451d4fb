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

from devicedeck.inventory.errors import DomainError, InvalidInput, NotFound, Problem
from devicedeck.inventory.models import ApiToken

SCOPES = ("read", "ingest", "admin")
TOKEN_PREFIX = "ddk_"
# Writing last_used_at on every request would turn every read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's name and scopes, or the local demo user when auth is off.

    `node` is the one node an ingest credential may write; `all_nodes` lets it write any.
    An admin may write any node, as it may create a token that does."""

    name: str
    scopes: frozenset[str]
    node: str | None = None
    all_nodes: bool = False
    anonymous: bool = False
    # The token behind the credential, and the dashboard session when it came from one: what
    # an open live stream checks to end when either is over.
    token_id: int | None = None
    session_id: int | None = None
    # A user an authenticating proxy vouched for (devicedeck/web/proxy.py), not a token.
    proxy_user: bool = False

    @classmethod
    def of_token(cls, token: ApiToken, *, session_id: int | None = None) -> Principal:
        """The caller a stored token stands for, signed in through a session or not."""
        return cls(
            name=token.name,
            scopes=frozenset(token.scopes),
            node=token.node,
            all_nodes=token.all_nodes,
            token_id=token.id,
            session_id=session_id,
        )

    def has(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    def may_write_node(self, node: str) -> bool:
        return self.all_nodes or "admin" in self.scopes or self.anonymous or self.node == node

    def actor_for_node(self, node: str) -> str:
        """Who the events of a snapshot for `node` credit: the credential and the node; with
        auth off, the node's agent, which is all the service knows of the sender."""
        return f"agent@{node}" if self.anonymous else f"{self.name}@{node}"


# With DEVICEDECK_AUTH=off a visitor without a token may read, nothing more: ingest and admin
# always need a token, so turning auth off for a demo never lets anyone write.
ANONYMOUS_READER = Principal(
    name="anonymous (auth off)", scopes=frozenset({"read"}), anonymous=True
)


class NodeMismatch(DomainError):
    """A snapshot for a node other than the one the credential is bound to."""

    code = "node_mismatch"
    status = 403


def check_node(principal: Principal, node: str) -> None:
    if not principal.may_write_node(node):
        raise NodeMismatch(
            f"this credential writes node {principal.node!r} only; "
            f"the snapshot is for node {node!r}",
            [Problem("node", "bound_node", f"must be {principal.node!r}, the credential's node")],
        )


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    session: Session,
    name: str,
    scopes: list[str],
    now: datetime,
    *,
    node: str | None = None,
    all_nodes: bool = False,
) -> tuple[ApiToken, str]:
    problems = _binding_problems(scopes, node, all_nodes)
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
        node=node,
        all_nodes=all_nodes,
        created_at=now,
    )
    session.add(token)
    session.flush()
    return token, plaintext


def _binding_problems(scopes: list[str], node: str | None, all_nodes: bool) -> list[Problem]:
    """An ingest token names the node it writes, or all nodes on purpose: a token that can
    rewrite the whole fleet must never be made by leaving a flag out."""
    if node is not None and all_nodes:
        return [Problem("node", "exclusive", "give node or all_nodes, not both")]
    if node is not None and (not node or len(node) > 253 or not node.isprintable()):
        return [Problem("node", "length", "must be 1 to 253 printable characters")]
    if "ingest" in scopes and node is None and not all_nodes:
        return [
            Problem(
                "node",
                "required",
                "an ingest token needs node (--node NODE) or all_nodes (--all-nodes)",
            )
        ]
    if "ingest" not in scopes and (node is not None or all_nodes):
        return [Problem("node", "ingest_only", "only an ingest token is bound to nodes")]
    return []


def describe_binding(token: ApiToken) -> str:
    if token.node is not None:
        return f"node {token.node}"
    if token.all_nodes:
        return "all nodes"
    return "-"


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
        principal=Principal.of_token(token),
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
