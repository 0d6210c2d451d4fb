"""Sends the latest snapshot of each stream to the service, whatever the service does.

Only the newest state of a stream is kept: while the service is down, ten changes to one
stream become one snapshot when it is back. A stream is sent when its content differs from
what the service last accepted from this agent. Everything is sent again:

- as a heartbeat every `heartbeat` seconds (streams whose source is live only, so a node
  whose kubelet is gone turns stale in the service instead of being kept fresh);
- after the service answers again following failures (it may have restarted or lost state);
- after a 409, under a new boot_id (the service holds a newer seq than ours for a stream).

Retries use capped full-jitter back-off. 401/403 is logged as an error and retried slowly,
or at once when the token file changes. Other 4xx answers mean the service refuses this
content: it is logged and not sent again until the stream's content changes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from devicedeck.agent.client import Outcome, PushResult
from devicedeck.agent.identity import SourceIdentity
from devicedeck.agent.metrics import AgentMetrics
from devicedeck.agent.snapshots import Snapshot
from devicedeck.agent.token import Signature
from devicedeck.retry import Backoff

log = logging.getLogger(__name__)

TOKEN_CHECK_SECONDS = 1.0


class Poster(Protocol):
    def post(self, path: str, payload: dict[str, object]) -> PushResult: ...


class Pusher:
    def __init__(
        self,
        client: Poster,
        identity: SourceIdentity,
        metrics: AgentMetrics,
        *,
        heartbeat: float,
        backoff: Backoff,
        auth_retry: float,
        is_live: Callable[[str], bool] = lambda stream: True,
        token_signature: Callable[[], Signature | None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._identity = identity
        self._metrics = metrics
        self._heartbeat = heartbeat
        self._backoff = backoff
        self._auth_retry = auth_retry
        self._is_live = is_live
        self._token_signature = token_signature
        self._clock = clock
        self._cond = threading.Condition()
        self._stopping = False
        self._latest: dict[str, Snapshot] = {}
        # Content the service accepted (under the current boot_id) or refused, per stream.
        self._accepted: dict[str, str] = {}
        self._refused: dict[str, str] = {}
        # Pending streams in the order their content was offered: offers made together go
        # out in the order given (device lists before allocations).
        self._order: dict[str, int] = {}
        self._counter = 0
        self._failing = False
        self._auth_failing = False
        self._next_heartbeat = clock() + heartbeat
        self._thread: threading.Thread | None = None
        self.last_success: float | None = None

    # ---- called by sources -----------------------------------------------------------------

    def offer(self, snapshot: Snapshot) -> None:
        with self._cond:
            previous = self._latest.get(snapshot.stream)
            self._latest[snapshot.stream] = snapshot
            if previous is not None and previous.key != snapshot.key:
                # New content queues behind what was offered before it, so a device list
                # offered ahead of the allocations that name its devices is sent first.
                self._order.pop(snapshot.stream, None)
            self._update_pending_locked(snapshot.stream)
            self._cond.notify_all()

    def pending(self) -> list[str]:
        with self._cond:
            return sorted(self._order, key=self._order.__getitem__)

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="agent-pusher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ---- internals -------------------------------------------------------------------------

    def _update_pending_locked(self, stream: str) -> None:
        key = self._latest[stream].key
        if key in (self._accepted.get(stream), self._refused.get(stream)):
            self._order.pop(stream, None)
        elif stream not in self._order:
            self._counter += 1
            self._order[stream] = self._counter
        self._metrics.pending_streams.set(len(self._order))

    def _resend_locked(self, streams: list[str], why: str) -> None:
        for stream in streams:
            self._accepted.pop(stream, None)
            self._refused.pop(stream, None)
            self._update_pending_locked(stream)
        if streams:
            level = logging.DEBUG if why == "heartbeat" else logging.INFO
            log.log(
                level,
                "sending streams again",
                extra={"event": "resend", "reason": why, "streams": len(streams)},
            )

    def _sleep(self, seconds: float) -> bool:
        """Wait, waking early on stop; True when stopping."""
        with self._cond:
            return self._cond.wait_for(lambda: self._stopping, timeout=max(0.0, seconds))

    def _next_locked(self) -> Snapshot | None:
        while not self._stopping:
            now = self._clock()
            if now >= self._next_heartbeat:
                self._next_heartbeat = now + self._heartbeat
                live = [s for s in self._latest if self._is_live(s)]
                self._resend_locked(sorted(live, key=lambda s: s.startswith("pod")), "heartbeat")
            if self._order:
                stream = min(self._order, key=self._order.__getitem__)
                return self._latest[stream]
            self._cond.wait(timeout=max(0.0, self._next_heartbeat - now))
        return None

    def _run(self) -> None:
        while True:
            with self._cond:
                snapshot = self._next_locked()
            if snapshot is None:
                return
            source = self._identity.next_source()
            try:
                result = self._client.post(snapshot.path, snapshot.payload(source))
            except Exception as e:
                # The client maps every answer to an outcome; this guards against the
                # unforeseen, because a dead pusher would silently end all reporting.
                log.exception(
                    "posting crashed", extra={"event": "push_crashed", "stream": snapshot.stream}
                )
                result = PushResult(Outcome.RETRY, None, f"{type(e).__name__}: {e}")
            delay = self._handle(snapshot, result)
            if delay and self._wait_after_failure(delay, result.outcome):
                return

    def _handle(self, snapshot: Snapshot, result: PushResult) -> float:
        """Record the result; return how long to wait before the next post."""
        stream = snapshot.stream
        if result.outcome is Outcome.ACCEPTED:
            return self._record_accepted(snapshot, result)
        self._metrics.push_failures.labels(result.reason).inc()
        with self._cond:
            if result.outcome is Outcome.REJECTED:
                self._refused[stream] = snapshot.key
                self._update_pending_locked(stream)
                log.error(
                    "snapshot refused; not sent again until the stream changes",
                    extra={
                        "event": "snapshot_refused",
                        "stream": stream,
                        "status": result.status,
                        "detail": result.detail,
                    },
                )
                return 0.0
            if result.outcome is Outcome.STALE:
                boot_id = self._identity.resync()
                log.warning(
                    "sequence older than the service's; resyncing under a new boot ID",
                    extra={
                        "event": "stale_sequence",
                        "stream": stream,
                        "detail": result.detail,
                        "action": "resync",
                        "new_boot_id": boot_id,
                    },
                )
                self._resend_locked(list(self._latest), "resync")
                # The first 409 is retried at once under the new boot_id; a service that
                # keeps answering 409 is not hammered.
                delay = self._backoff.next_delay() if self._failing else 0.0
                self._failing = True
                return delay
            self._failing = True
            if result.outcome is Outcome.UNAUTHORIZED:
                if not self._auth_failing:
                    log.error(
                        "the service refused the token; check --token-file or "
                        "DEVICEDECK_TOKEN, that the token has the ingest scope and writes this "
                        "--node; retrying every retry_in seconds or when the token file changes",
                        extra={
                            "event": "unauthorized",
                            "status": result.status,
                            "detail": result.detail,
                            "retry_in": self._auth_retry,
                        },
                    )
                self._auth_failing = True
                return self._auth_retry
            delay = self._backoff.next_delay()
            failures = self._backoff.failures
            # A long outage logs its first failure and then every tenth, not every retry.
            log.log(
                logging.WARNING if failures == 1 or failures % 10 == 0 else logging.DEBUG,
                "post failed; retrying",
                extra={
                    "event": "push_failed",
                    "stream": stream,
                    "status": result.status,
                    "detail": result.detail,
                    "retry_in": round(delay, 2),
                    "failures": failures,
                },
            )
            return delay

    def _record_accepted(self, snapshot: Snapshot, result: PushResult) -> float:
        stream = snapshot.stream
        self._metrics.snapshots_sent.labels(snapshot.kind).inc()
        now = time.time()
        self._metrics.last_success.set(now)
        self.last_success = now
        with self._cond:
            was_known = self._accepted.get(stream) == snapshot.key
            self._accepted[stream] = snapshot.key
            self._refused.pop(stream, None)
            self._update_pending_locked(stream)
            if self._failing:
                log.info(
                    "the service accepts posts again; sending every stream",
                    extra={"event": "service_reachable", "action": "resend_all"},
                )
                self._failing = False
                self._auth_failing = False
                self._backoff.reset()
                self._resend_locked([s for s in self._latest if s != stream], "recovered")
            elif was_known and result.changed:
                # A re-send of content the service had accepted changed something there: it
                # lost state (restored or emptied database). Bring every stream back.
                self._resend_locked([s for s in self._latest if s != stream], "service_changed")
        return 0.0

    def _wait_after_failure(self, delay: float, outcome: Outcome) -> bool:
        if outcome is not Outcome.UNAUTHORIZED:
            return self._sleep(delay)
        # Wait slowly, but try again at once when the token file changes.
        before = self._token_signature()
        deadline = self._clock() + delay
        while (left := deadline - self._clock()) > 0:
            if self._sleep(min(TOKEN_CHECK_SECONDS, left)):
                return True
            if self._token_signature() != before:
                log.info(
                    "the token file changed; retrying",
                    extra={"event": "token_changed", "action": "retry"},
                )
                return False
        return False
