"""The bearer token, from a file that is re-read whenever it changes, or from the environment.

Kubernetes rotates projected service-account tokens by swapping a symlink, so the file is
checked with stat() (which follows the link) before every use: a new inode, size or mtime
means a new token. stat() is cheap enough to do per request.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

log = logging.getLogger(__name__)

Signature = tuple[int, int, int, int]


class TokenSource:
    def __init__(self, path: Path | None = None, fixed: str | None = None) -> None:
        self.path = path
        self._fixed = (fixed or "").strip() or None
        self._lock = threading.Lock()
        self._signature: Signature | None = None
        self._token: str | None = None
        self._problem: str | None = None

    def _stat(self) -> Signature | None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError as e:
            self._report(f"cannot stat token file {self.path}: {e.strerror or e}")
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def _report(self, problem: str) -> None:
        # Logged once per distinct problem, not on every request.
        if problem != self._problem:
            log.error(
                "keeping the previous token", extra={"event": "token_unreadable", "reason": problem}
            )
            self._problem = problem

    def signature(self) -> Signature | None:
        """Changes whenever the token file changes (for callers waiting on a rotation)."""
        if self.path is None:
            return None
        with self._lock:
            return self._stat()

    def current(self) -> str | None:
        if self.path is None:
            return self._fixed
        with self._lock:
            signature = self._stat()
            if signature is None or signature == self._signature:
                return self._token
            try:
                text = self.path.read_text()
            except (OSError, UnicodeDecodeError) as e:
                self._report(f"cannot read token file {self.path}: {e}")
                return self._token
            token = text.strip()
            if not token:
                # Likely caught in the middle of a rewrite; the next change brings the token.
                self._report(f"token file {self.path} is empty")
                return self._token
            self._signature = signature
            self._problem = None
            if self._token is not None and token != self._token:
                log.info("token reloaded", extra={"event": "token_reloaded", "path": self.path})
            self._token = token
            return token
