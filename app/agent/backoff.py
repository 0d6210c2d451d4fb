"""Retry timing: capped full-jitter exponential back-off, and a minimum gap between calls."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable


class Backoff:
    """The n-th consecutive failure waits a random time in [0, min(cap, base * 2**n)].

    Full jitter spreads the retries of many agents that failed together (a service restart
    seen by every node at once), so they do not come back in lockstep.
    """

    def __init__(self, base: float, cap: float, rng: random.Random | None = None) -> None:
        if base <= 0 or cap <= 0:
            raise ValueError("back-off base and cap must be positive")
        self.base = base
        self.cap = cap
        self._rng = rng or random.Random()
        self.failures = 0

    def ceiling(self) -> float:
        """The upper bound of the next delay."""
        # The exponent is bounded so that a long outage cannot overflow the float.
        return min(self.cap, self.base * 2 ** min(self.failures, 62))

    def next_delay(self) -> float:
        delay = self._rng.uniform(0.0, self.ceiling())
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0


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
