"""inotify watches on kubelet directories that may not exist yet, or may be re-created.

DirectoryWatcher needs its directory to exist and ends quietly when it is removed, so the
reader calls ensure() on every resync: a directory that appeared or was replaced (new
inode) gets a fresh watcher. ensure() says when it started one, since changes made while
nothing was watching were missed and call for a full re-read.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from devicedeck.kubelet.socket_watch import ChangeCallback, DirectoryWatcher

log = logging.getLogger(__name__)

DirId = tuple[int, int]


def _dir_id(directory: Path) -> DirId | None:
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class DirectoryWatches:
    def __init__(self, specs: Sequence[tuple[str, Path, ChangeCallback]]) -> None:
        self._specs = list(specs)
        self._active: dict[str, tuple[DirectoryWatcher, DirId]] = {}

    def ensure(self) -> bool:
        """(Re)start watchers for directories that appeared or were replaced."""
        started = False
        for name, directory, callback in self._specs:
            identity = _dir_id(directory)
            current = self._active.get(name)
            if current is not None and current[1] == identity:
                continue
            if current is not None:
                current[0].stop()
                del self._active[name]
            if identity is None:
                continue
            watcher = DirectoryWatcher(directory, callback, name=f"agent-watch-{name}")
            try:
                watcher.start()
            except OSError as e:
                log.warning(
                    "watch failed", extra={"event": "watch_failed", "dir": directory, "error": e}
                )
                continue
            self._active[name] = (watcher, identity)
            started = True
        return started

    def stop(self) -> None:
        for watcher, _ in self._active.values():
            watcher.stop()
        self._active.clear()
