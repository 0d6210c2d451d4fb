"""Who is sending: the `source {boot_id, seq, boot_started_at}` every snapshot carries.

The service orders each stream's snapshots by seq within one boot_id and starts a new
sequence for a new boot_id, unless that boot began before the one it applies now: then the
snapshot is late (an agent that was replaced, still sending or retrying) and changes nothing.
The agent's boot_id joins the node's kernel boot id, the time the agent started and a random
part, so a restarted agent (or a rebooted node) always starts a fresh sequence. After a 409
the random part is replaced and the boot's start is now: the service then takes the next
snapshots as the start of a new sequence and the agent can re-send everything.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

KERNEL_BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
UNKNOWN_BOOT = "no-boot-id"


def read_kernel_boot_id(path: Path = KERNEL_BOOT_ID_PATH) -> str:
    try:
        value = path.read_text().strip()
    except OSError:
        return UNKNOWN_BOOT
    # The service accepts up to 128 characters; a kernel boot id is a 36-character UUID.
    return value[:64] or UNKNOWN_BOOT


class SourceIdentity:
    def __init__(
        self,
        kernel_boot_id: str,
        started_at: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._prefix = f"{kernel_boot_id}.{int(started_at * 1000)}"
        self._lock = threading.Lock()
        self._clock = clock
        self._boot_id = self._new_boot_id()
        self._boot_started_at = _rfc3339(started_at)
        self._seq = 0
        self.generation = 0

    def _new_boot_id(self) -> str:
        return f"{self._prefix}.{secrets.token_hex(4)}"

    @property
    def boot_id(self) -> str:
        with self._lock:
            return self._boot_id

    def next_source(self) -> dict[str, object]:
        """A source for the next snapshot: one counter for every stream keeps each
        stream's seq increasing too."""
        with self._lock:
            self._seq += 1
            return {
                "boot_id": self._boot_id,
                "seq": self._seq,
                "boot_started_at": self._boot_started_at,
            }

    def resync(self) -> str:
        """Start a new sequence (after a 409); returns the new boot_id."""
        with self._lock:
            self._boot_id = self._new_boot_id()
            self._boot_started_at = _rfc3339(self._clock())
            self._seq = 0
            self.generation += 1
            return self._boot_id


def _rfc3339(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond:06d}Z"
