"""What a query's answer is as of: the moment it is answered, and from when on a node that has
not reported counts as stale (its devices then read Unknown)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Freshness:
    """The time a query is answered at, and how long a node may go without reporting."""

    now: datetime
    stale_after: timedelta

    @property
    def cutoff(self) -> datetime:
        """Nodes last seen before this are stale."""
        return self.now - self.stale_after

    def is_stale(self, last_seen: datetime) -> bool:
        return last_seen < self.cutoff
