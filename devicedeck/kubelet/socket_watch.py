"""Watch a directory for unix sockets being created or removed (inotify).

A device plugin must notice two things the kubelet does on restart: it deletes every
socket in the device-plugins directory, and it creates a new kubelet.sock. This watcher
reports the names of entries created or removed in one directory to a callback, from a
thread it owns; stop() wakes the thread at once through a pipe instead of polling.
"""

from __future__ import annotations

import logging
import os
import select
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from inotify_simple import INotify
from inotify_simple import flags as inotify_flags

log = logging.getLogger(__name__)

# Called with (created names, removed names) for each batch of inotify events.
ChangeCallback = Callable[[set[str], set[str]], None]

_CREATED = inotify_flags.CREATE | inotify_flags.MOVED_TO
_REMOVED = inotify_flags.DELETE | inotify_flags.MOVED_FROM


class DirectoryWatcher:
    def __init__(self, directory: Path, on_change: ChangeCallback, *, name: str) -> None:
        self.directory = directory
        self._on_change = on_change
        self._name = name
        self._inotify: INotify | None = None
        self._wake_read = -1
        self._wake_write = -1
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> None:
        """Start watching. Changes from this moment on are reported, so start the watcher
        before checking the directory's state to avoid missing a change in between."""
        if self._thread is not None:
            raise RuntimeError("watcher already started")
        inotify = INotify()
        try:
            inotify.add_watch(str(self.directory), _CREATED | _REMOVED | inotify_flags.DELETE_SELF)
        except OSError:
            inotify.close()
            raise
        self._inotify = inotify
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        os.write(self._wake_write, b"x")
        if thread is not threading.current_thread():
            thread.join()
        self._thread = None
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        os.close(self._wake_read)
        os.close(self._wake_write)

    def _run(self) -> None:
        inotify = self._inotify
        assert inotify is not None
        while not self._stopping.is_set():
            readable, _, _ = select.select([inotify.fileno(), self._wake_read], [], [])
            if self._wake_read in readable or self._stopping.is_set():
                return
            created: set[str] = set()
            removed: set[str] = set()
            gone = False
            for event in inotify.read(timeout=0):
                if event.mask & _CREATED:
                    created.add(event.name)
                    removed.discard(event.name)
                elif event.mask & _REMOVED:
                    removed.add(event.name)
                    created.discard(event.name)
                if event.mask & (inotify_flags.DELETE_SELF | inotify_flags.IGNORED):
                    gone = True
            if created or removed:
                try:
                    self._on_change(created, removed)
                except Exception:
                    # The watcher must outlive a failing handler, or the plugin would
                    # silently stop re-registering after a kubelet restart.
                    log.exception(
                        "watch callback failed",
                        extra={"event": "watch_callback_failed", "dir": self.directory},
                    )
            if gone:
                log.warning(
                    "watched dir removed",
                    extra={"event": "watched_dir_removed", "dir": self.directory},
                )
                return


# Device, inode and change time: which socket is at a path. A socket re-created there is
# another one even when the filesystem hands it the inode number of the one removed.
SocketId = tuple[int, int, int]


def socket_id(path: Path) -> SocketId | None:
    """The socket at path now; None when there is none."""
    try:
        st = path.stat()
    except OSError:
        return None
    if not stat.S_ISSOCK(st.st_mode):
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)
