"""A daemon thread that holds one kubelet gRPC stream at a time.

The taps and the DRA health streams block inside a streaming call; stopping them means waking
the thread, cancelling the call it waits in, and joining it. That lifecycle is the same for each
kind of stream, so it lives here; a subclass provides `_run`.
"""

from __future__ import annotations

import threading
from typing import Any


class StreamThread:
    def __init__(self, thread_name: str) -> None:
        self._thread_name = thread_name
        self._cond = threading.Condition()
        self._stopping = False
        # The streaming call in flight, set by `_run` under `_cond`, so stop() can cancel it.
        self._call: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            call = self._call
            self._cond.notify_all()
        if call is not None:
            call.cancel()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        raise NotImplementedError
