"""A minimum gap between calls to the kubelet (retry back-off is devicedeck.retry.Backoff)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class CallSpacer:
    """Keeps calls at least `gap` seconds apart (the kubelet's PodResources rate limit is
    shared by every client on the node, so the agent spends at most one call a second)."""

    def __init__(self, gap: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.gap = gap
        self._clock = clock
        self._lock = threading.Lock()
        self._last = float("-inf")
        self._not_before = 0.0

    def wait_time(self) -> float:
        with self._lock:
            return max(0.0, self._not_before - self._clock())

    def record_call(self, extra_delay: float = 0.0) -> None:
        """A call was made now; the next may come after the gap (or a longer back-off)."""
        with self._lock:
            self._last = self._clock()
            self._not_before = self._last + max(self.gap, extra_delay)

    def forgive(self) -> None:
        """Drop a back-off in progress (the other side was replaced); the gap stays."""
        with self._lock:
            self._not_before = self._last + self.gap
