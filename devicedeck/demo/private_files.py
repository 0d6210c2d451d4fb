"""Files only their owner may read, written whole: tokens for the demo's agents.

Kept apart from the database code so the agents' credentials can be written by callers that
have no database (the truth oracle)."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Replace the file's content, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    # Atomic, so an agent starting meanwhile reads the old token or the new one, never half.
    os.replace(temporary, path)
