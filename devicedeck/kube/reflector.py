"""List + watch of one collection, in a thread: the client-go reflector pattern.

List everything, apply it as the whole truth, then watch from the list's resourceVersion and
apply each event in its own transaction. Relist when the server says 410 Gone (the version
was compacted), when applying an event failed (it would be lost otherwise), and every
`resync` seconds. Connection failures and refusals (RBAC 403, a group the cluster does not
serve) back off with a cap and keep trying; the thread only ends when told to stop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import urllib3
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.db import write_session
from devicedeck.kube import status
from devicedeck.kube.client import Kind, KubeApi, watch_events
from devicedeck.kube.errors import ApiStatus, ApiUnreachable
from devicedeck.retry import Backoff

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
# Some jitter, so replicas that failed together do not retry together.
BACKOFF_JITTER = 0.2
# Watches re-open at least this often (and write their status when they do).
WATCH_TIMEOUT_MAX = 120
# Status rows are rewritten while watching at most this often, not on every event.
STATUS_EVERY = 15.0
INSTANCE = f"{socket.gethostname()}:{os.getpid()}"

ApplyList = Callable[[Session, list[dict[str, Any]], datetime], None]
ApplyEvent = Callable[[Session, str, dict[str, Any], datetime], None]


@dataclass(frozen=True)
class Sync:
    """How one collection lands in the database."""

    kind: Kind
    apply_list: ApplyList
    apply_event: ApplyEvent
    # Events for objects this says no to are skipped without opening a write transaction
    # (most pods of a cluster request no device).
    relevant: Callable[[dict[str, Any]], bool] = lambda _obj: True
    # Told, before the first change applied after the watch broke, that what changed
    # meanwhile arrives at once.
    mark_gap: Callable[[Session], None] | None = None


class Reflector:
    def __init__(
        self,
        api: KubeApi,
        sync: Sync,
        factory: sessionmaker[Session],
        resync: float,
        stop: threading.Event,
    ) -> None:
        self.api = api
        self.sync = sync
        self.factory = factory
        self.resync = resync
        self.stop = stop
        self.resource_version = ""
        self.next_resync = 0.0
        # The watch broke (or has not run yet in this process) since the last change applied.
        self.broken = True
        self._response: urllib3.BaseHTTPResponse | None = None
        self._lock = threading.Lock()
        self._status: dict[str, Any] = {
            "state": status.STARTING,
            "message": None,
            "resource_version": None,
            "last_list_at": None,
            "last_event_at": None,
            "lists": 0,
            "events": 0,
            "errors": 0,
            "retry_at": None,
            "instance": INSTANCE,
        }
        self._status_written = 0.0

    @property
    def name(self) -> str:
        return self.sync.kind.name

    def run(self) -> None:
        backoff = Backoff(BACKOFF_FIRST, BACKOFF_MAX, jitter=BACKOFF_JITTER)
        gone_in_a_row = 0
        self._report(status.STARTING, force=True)
        while not self.stop.is_set():
            try:
                if not self.resource_version or time.monotonic() >= self.next_resync:
                    self._list()
                started = time.monotonic()
                events = self._watch()
                if events or time.monotonic() - started >= 1.0:
                    backoff.reset()
                    gone_in_a_row = 0
                elif not self.stop.is_set():
                    # A watch that ends at once with nothing in it: do not spin on it.
                    self.stop.wait(backoff.next_delay())
            except ApiStatus as e:
                if self.stop.is_set():
                    break
                if e.gone:
                    log.info(
                        "watch expired, relisting",
                        extra={
                            "event": "cluster_watch_expired",
                            "resource": self.name,
                            "reason": e,
                        },
                    )
                    self.resource_version = ""
                    self.broken = True
                    gone_in_a_row += 1
                    # Relist at once the first time; a server that keeps answering 410 to
                    # fresh versions gets the same backoff as any other failure.
                    if gone_in_a_row > 1:
                        self._fail(backoff, status.BACKOFF, f"410 again after relisting: {e}")
                    continue
                self.broken = True
                self._fail(backoff, *_classify(e))
            except ApiUnreachable as e:
                if self.stop.is_set():
                    break
                self.broken = True
                self._fail(backoff, status.BACKOFF, f"API server unreachable: {e}")
            except SQLAlchemyError as e:
                # The event that failed is lost: start again from a full list.
                self.resource_version = ""
                self.broken = True
                self._fail(backoff, status.BACKOFF, f"database error: {type(e).__name__}: {e}")
            except Exception as e:  # keep the thread alive on anything unforeseen; it is logged
                log.exception(
                    "cluster watch failed",
                    extra={"event": "cluster_watch_failed", "resource": self.name},
                )
                self.resource_version = ""
                self.broken = True
                self._fail(backoff, status.BACKOFF, f"unexpected error: {type(e).__name__}: {e}")
        self._report(status.STOPPED, force=True)

    def interrupt(self) -> None:
        """Unblock a thread waiting on the watch stream (called after `stop` is set)."""
        with self._lock:
            response = self._response
        shutdown = getattr(response, "shutdown", None)
        if shutdown is not None:
            with contextlib.suppress(OSError):
                shutdown()

    def _list(self) -> None:
        self._report(status.LISTING, force=True)
        items, version = self.api.list_all(self.sync.kind)
        now = utcnow()
        with write_session(self.factory) as session:
            self._mark_gap(session)
            self.sync.apply_list(session, items, now)
        self.broken = False
        self.resource_version = version
        self.next_resync = time.monotonic() + self.resync
        self._status.update(
            lists=self._status["lists"] + 1,
            last_list_at=now.isoformat(),
            resource_version=version,
            retry_at=None,
        )
        log.info(
            "listed",
            extra={
                "event": "cluster_listed",
                "resource": self.name,
                "items": len(items),
                "version": version,
            },
        )

    def _watch(self) -> int:
        timeout = int(max(1, min(WATCH_TIMEOUT_MAX, self.next_resync - time.monotonic())))
        response = self.api.open_watch(self.sync.kind, self.resource_version, timeout)
        with self._lock:
            self._response = response
        count = 0
        try:
            self._report(status.WATCHING, force=self._status["state"] != status.WATCHING)
            if self.stop.is_set():
                return 0
            for event in watch_events(response):
                self._apply(event)
                count += 1
                if self.stop.is_set():
                    break
        finally:
            with self._lock:
                self._response = None
            response.close()
            response.release_conn()
        return count

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event["object"]
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED") and self.sync.relevant(obj):
            now = utcnow()
            with write_session(self.factory) as session:
                self._mark_gap(session)
                self.sync.apply_event(session, str(kind), obj, now)
            self.broken = False
            self._status.update(events=self._status["events"] + 1, last_event_at=now.isoformat())
        if version:
            self.resource_version = str(version)
            self._status["resource_version"] = self.resource_version
        self._report(status.WATCHING)

    def _mark_gap(self, session: Session) -> None:
        if self.broken and self.sync.mark_gap is not None:
            self.sync.mark_gap(session)

    def _fail(self, backoff: Backoff, state: str, message: str) -> None:
        delay = backoff.next_delay()
        self._status.update(
            errors=self._status["errors"] + 1,
            retry_at=datetime.fromtimestamp(time.time() + delay, utcnow().tzinfo).isoformat(),
        )
        log.warning(
            "cluster watch problem",
            extra={
                "event": "cluster_watch_problem",
                "resource": self.name,
                "state": state,
                "retry_in": delay,
                "detail": message,
            },
        )
        self._report(state, message, force=True)
        self.stop.wait(delay)

    def _report(self, state: str, message: str | None = None, force: bool = False) -> None:
        """Write the status row on a change of state, and otherwise every STATUS_EVERY s."""
        now = time.monotonic()
        if not force and now - self._status_written < STATUS_EVERY:
            return
        self._status.update(state=state, message=message)
        if state in (status.LISTING, status.WATCHING):
            self._status["retry_at"] = None
        try:
            with write_session(self.factory) as session:
                status.write_status(session, self.name, dict(self._status), utcnow())
        except SQLAlchemyError as e:
            log.warning(
                "cannot write watch status",
                extra={"event": "watch_status_not_written", "resource": self.name, "error": e},
            )
            return
        self._status_written = now


def _classify(e: ApiStatus) -> tuple[str, str]:
    if e.code in (401, 403):
        return (
            status.FORBIDDEN,
            f"the API server refused ({e.code} {e.reason}): {e.message}; check the RBAC rules "
            "of Devicedeck's service account (get, list, watch on this resource)",
        )
    if e.code == 404:
        return (
            status.UNAVAILABLE,
            f"the API server does not serve this resource ({e.message}); for DRA, "
            "resource.k8s.io (v1, v1beta2 or v1beta1) needs Kubernetes 1.32 or newer with "
            "DRA turned on (on by default since 1.34)",
        )
    return status.BACKOFF, f"the API server answered {e.code} {e.reason}: {e.message}"
