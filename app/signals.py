"""Waiting in the main thread for a stop that a signal handler requests."""

from __future__ import annotations

import threading


def wait_for_stop(stop: threading.Event) -> None:
    """Block until `stop` is set, waking every second.

    The kernel may deliver SIGTERM to any thread (gRPC's, httpx's). Python runs the handler in
    the main thread, but a main thread blocked in a wait with no timeout is not woken when the
    signal lands elsewhere, so the handler, and the stop, would wait for something else to
    happen first.
    """
    while not stop.wait(1.0):
        pass
