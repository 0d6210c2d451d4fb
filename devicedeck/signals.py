"""Running a process until SIGTERM or SIGINT asks it to stop."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

log = logging.getLogger(__name__)


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event that SIGTERM or SIGINT sets while the block runs; the previous handlers come
    back afterwards."""
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal", extra={"event": "signal", "signal": signal.Signals(signum).name})
        stop.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def wait_for_stop(stop: threading.Event) -> None:
    """Block until `stop` is set, waking every second.

    The kernel may deliver SIGTERM to any thread (gRPC's, httpx's). Python runs the handler in
    the main thread, but a main thread blocked in a wait with no timeout is not woken when the
    signal lands elsewhere, so the handler, and the stop, would wait for something else to
    happen first.
    """
    while not stop.wait(1.0):
        pass
