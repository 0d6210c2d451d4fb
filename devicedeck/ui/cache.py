"""A small per-process cache for page data that many open tabs ask for at once.

Every open tab re-renders its page when a change is announced, so ten tabs on the overview
would run the same cluster-wide aggregation ten times per change. Entries are keyed by the
newest event id (any change to the inventory writes an event) and a short time bucket (a node
turns stale by the clock alone, without an event), so cached data is at most TTL seconds older
than what a fresh query would say.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_ENTRIES = 64


class PageCache:
    def __init__(self) -> None:
        self._entries: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def get_or_compute(self, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._entries:
                found: T = self._entries[key]
                return found
        value = compute()
        with self._lock:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.pop(next(iter(self._entries)))
            self._entries[key] = value
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
