"""A token kept in a file and reused: the demos' agents get theirs this way.

The database keeps only token hashes, so the plaintext lives in the file (mode 0600). If
the file still holds a valid token it is kept, so restarting a demo changes nothing; if it
is missing or its token is unknown (a fresh database), a new token is made and written.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.credentials.tokens import authenticate, create_token
from devicedeck.db import write_session
from devicedeck.inventory.models import ApiToken


def read_token_file(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return text or None


def _valid(factory: sessionmaker[Session], token: str, scopes: list[str], node: str | None) -> bool:
    with factory() as session:
        found = authenticate(session, token, utcnow())
    return (
        found is not None
        and all(found.principal.has(s) for s in scopes)
        and found.principal.node == node
    )


def _free_name(session: Session, base: str) -> str:
    taken = set(session.scalars(select(ApiToken.name).where(ApiToken.name.startswith(base))))
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def ensure_token_file(
    factory: sessionmaker[Session],
    path: Path,
    name: str,
    scopes: list[str],
    *,
    node: str | None = None,
) -> tuple[str, bool]:
    """The token in `path`, creating (and writing) one when there is no valid one.

    Returns (token, created). A new token gets `name`, or `name-N` when that name is
    taken by a token whose plaintext is lost. With `node`, the token writes that node only;
    an ingest token without one writes every node.
    """
    existing = read_token_file(path)
    if existing is not None and _valid(factory, existing, scopes, node):
        return existing, False
    all_nodes = node is None and "ingest" in scopes
    with write_session(factory) as session:
        _, plaintext = create_token(
            session, _free_name(session, name), scopes, utcnow(), node=node, all_nodes=all_nodes
        )
    write_private(path, plaintext)
    return plaintext, True


def write_private(path: Path, text: str) -> None:
    """Replace the file's content, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    # Atomic, so an agent starting meanwhile reads the old token or the new one, never half.
    os.replace(temporary, path)
