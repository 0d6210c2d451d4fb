"""Retry timing shared by every loop that waits after a failure (agent, cluster watch, live
updates, the simulated kubelet's plugin watcher).

Standard library only, so any layer, the node agent and the simulators included, may use it.
"""

from __future__ import annotations

import random

FULL_JITTER = 1.0
NO_JITTER = 0.0


class Backoff:
    """Exponential back-off: the n-th consecutive failure (from 0) waits about
    min(cap, base * 2**n), and `reset()` after a success starts again from `base`.

    `jitter` is the fraction of that ceiling that is left to chance: the delay is drawn
    uniformly from [ceiling * (1 - jitter), ceiling]. Full jitter (1.0) spreads the retries of
    many clients that failed together (every agent sees a service restart at once), so they do
    not come back in lockstep; 0.0 gives exact delays where one client waits alone.
    """

    def __init__(
        self,
        base: float,
        cap: float,
        rng: random.Random | None = None,
        *,
        jitter: float = FULL_JITTER,
    ) -> None:
        if base <= 0 or cap <= 0:
            raise ValueError("back-off base and cap must be positive")
        if not 0.0 <= jitter <= 1.0:
            raise ValueError("back-off jitter must be between 0 and 1")
        self.base = base
        self.cap = cap
        self.jitter = jitter
        self._rng = rng or random.Random()
        self.failures = 0

    def ceiling(self) -> float:
        """The upper bound of the next delay."""
        # The exponent is bounded so that a long outage cannot overflow the float.
        return min(self.cap, self.base * 2 ** min(self.failures, 62))

    def next_delay(self) -> float:
        """The wait before the next attempt; counts one more failure."""
        ceiling = self.ceiling()
        self.failures += 1
        if self.jitter == NO_JITTER:
            return ceiling
        return self._rng.uniform(ceiling * (1.0 - self.jitter), ceiling)

    def reset(self) -> None:
        self.failures = 0
