"""The controllers the simulated API server runs in place of a controller manager, on one
thread: the namespace controller's deletions, and the node lifecycle controller's check of
each node's lease."""

from __future__ import annotations

import threading
import time

from devicedeck.sim.apiserver.node_lifecycle import NodeLifecycle
from devicedeck.sim.apiserver.store import Store

TICK_SECONDS = 0.5
NODE_CHECK_SECONDS = 5.0


class Controllers:
    def __init__(self, store: Store, node_grace_seconds: float) -> None:
        self.store = store
        self.nodes = NodeLifecycle(store, node_grace_seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controllers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        checked = time.monotonic()
        while not self._stop.wait(TICK_SECONDS):
            self.store.finish_namespace_deletions()
            if time.monotonic() - checked >= NODE_CHECK_SECONDS:
                checked = time.monotonic()
                self.nodes.check()
