"""Reads the kubelet: PodResources List and GetAllocatableResources, and the checkpoint.

One thread owns the PodResources connection and makes every call, at most one a second
(the kubelet's rate limit is shared by every client on the node). What to call is driven by
what changed:

- every `interval` seconds: both calls and the checkpoint (the safety net);
- every `pods_interval` seconds: List, for pods that ended (see below);
- the checkpoint re-written (inotify on device-plugins/): its pod entries changed -> List;
  its RegisteredDevices (the healthy set) changed -> GetAllocatableResources;
- a plugin socket created or removed in device-plugins/ -> GetAllocatableResources;
- the kubelet's sockets re-created (a kubelet restart) -> re-dial and both calls.

The kubelet writes nothing when a pod ends: the checkpoint keeps a deleted pod's entries
until its next write for another reason, and no file changes. Only List tells, so it is asked
every `pods_interval` (1 s by default: a pod's end reaches the service about as fast as its
start, which the checkpoint's write announces). An unchanged answer is not published.
Failed calls (RESOURCE_EXHAUSTED, UNAVAILABLE, anything) back off with full jitter.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import grpc

from devicedeck.agent.call_spacer import CallSpacer
from devicedeck.agent.metrics import AgentMetrics
from devicedeck.agent.watches import DirectoryWatches
from devicedeck.kubelet.checkpoint import Checkpoint, CheckpointError, read_checkpoint
from devicedeck.kubelet.paths import CHECKPOINT_FILE_NAME, KUBELET_SOCKET_NAME, KubeletPaths
from devicedeck.kubelet.podresources import PodResourcesClient, PodResourcesError
from devicedeck.kubelet.proto import podresources_pb2
from devicedeck.retry import Backoff

log = logging.getLogger(__name__)

LIST = "List"
ALLOCATABLE = "GetAllocatableResources"
# A checkpoint write shows as a temp file and a rename; wait for the burst to settle.
DEBOUNCE_SECONDS = 0.05
DIAL_TIMEOUT_SECONDS = 3.0
CALL_TIMEOUT_SECONDS = 10.0
# Files the kubelet keeps in device-plugins/ that are not plugin sockets.
NOT_PLUGIN_SOCKETS = frozenset({CHECKPOINT_FILE_NAME, KUBELET_SOCKET_NAME, "DEPRECATION"})


@dataclass(frozen=True)
class KubeletView:
    """What the kubelet said last. Messages are replaced, never changed in place."""

    pods: podresources_pb2.ListPodResourcesResponse | None = None
    allocatable: podresources_pb2.AllocatableResourcesResponse | None = None
    # False when the kubelet answers GetAllocatableResources with UNIMPLEMENTED (< 1.21 or
    # the gate off); the checkpoint's RegisteredDevices then stands in for the healthy set.
    allocatable_supported: bool = True
    # True while a change is known that GetAllocatableResources has not caught up with;
    # derived health waits, so it never reports a half-updated picture.
    allocatable_pending: bool = True
    checkpoint: Checkpoint | None = None
    observed_at: datetime | None = None
    # When (the reader's monotonic clock) the kubelet last restarted, as its sockets being
    # re-created tell; None if not since the agent started.
    kubelet_restarted_at: float | None = None


def _entry_keys(checkpoint: Checkpoint | None) -> set[tuple[str, str, str, frozenset[str]]]:
    if checkpoint is None:
        return set()
    return {
        (e.pod_uid, e.container_name, e.resource_name, frozenset(e.all_device_ids()))
        for e in checkpoint.entries
    }


def _registered(checkpoint: Checkpoint | None) -> dict[str, frozenset[str]]:
    if checkpoint is None:
        return {}
    return {r: frozenset(ids) for r, ids in checkpoint.registered_devices.items()}


class KubeletReader:
    def __init__(
        self,
        paths: KubeletPaths,
        metrics: AgentMetrics,
        *,
        interval: float,
        pods_interval: float | None = None,
        backoff: Backoff,
        on_change: Callable[[KubeletView], None],
        on_plugin_sockets: Callable[[set[str], set[str]], None] = lambda created, removed: None,
        min_call_gap: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.paths = paths
        self._metrics = metrics
        self._interval = interval
        self._pods_interval = min(interval, pods_interval or interval)
        self._backoff = backoff
        self._on_change = on_change
        self._on_plugin_sockets = on_plugin_sockets
        self._spacer = CallSpacer(min_call_gap, clock)
        self._clock = clock
        self._cond = threading.Condition()
        self._stopping = False
        # Set by watcher threads, taken by the reader thread.
        self._checkpoint_dirty_at: float | None = None
        self._plugins_changed = False
        self._kubelet_restarted = False
        self._redial = False
        # Owned by the reader thread.
        self._need: set[str] = {ALLOCATABLE, LIST}
        # When each call was last made, so a short interval cannot starve one of them.
        self._last_called = {ALLOCATABLE: float("-inf"), LIST: float("-inf")}
        self._view = KubeletView()
        self._watches = DirectoryWatches(
            [
                ("device-plugins", paths.device_plugins_dir, self._on_plugins_dir),
                ("pod-resources", paths.pod_resources_dir, self._on_pod_resources_dir),
            ]
        )
        self._client_lock = threading.Lock()
        self._client: PodResourcesClient | None = None
        self._client_socket: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        self.last_success: float | None = None
        self.last_success_at: float | None = None  # wall clock, for /healthz

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="agent-kubelet", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        # Closing the channel cancels a call in flight, so stop does not wait for it.
        self._close_client()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._watches.stop()
        self._close_client()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def since(self, moment: float) -> float:
        """Seconds from `moment` (of this reader's clock) to now."""
        return self._clock() - moment

    def fresh(self, within: float) -> bool:
        """Whether a PodResources call succeeded in the last `within` seconds."""
        return self.last_success is not None and self._clock() - self.last_success <= within

    # ---- inotify callbacks (watcher threads) -------------------------------------------------

    def _on_plugins_dir(self, created: set[str], removed: set[str]) -> None:
        created = {n for n in created if not n.startswith(".")}
        removed = {n for n in removed if not n.startswith(".")}
        with self._cond:
            if CHECKPOINT_FILE_NAME in created | removed and self._checkpoint_dirty_at is None:
                self._checkpoint_dirty_at = self._clock()
            if (created | removed) - NOT_PLUGIN_SOCKETS:
                self._plugins_changed = True
            if KUBELET_SOCKET_NAME in created:
                self._kubelet_restarted = True
            self._cond.notify_all()
        sockets_created = created - NOT_PLUGIN_SOCKETS
        sockets_removed = removed - NOT_PLUGIN_SOCKETS
        if sockets_created or sockets_removed or KUBELET_SOCKET_NAME in created:
            self._on_plugin_sockets(sockets_created, sockets_removed)

    def _on_pod_resources_dir(self, created: set[str], removed: set[str]) -> None:
        if KUBELET_SOCKET_NAME in created | removed:
            with self._cond:
                self._redial = True
                self._cond.notify_all()

    # ---- the reader thread -----------------------------------------------------------------

    def _wait_for_work(self, next_resync: float, next_list: float) -> tuple[bool, bool, bool]:
        """Block until something is due; returns (resync due, checkpoint dirty, List due)."""
        with self._cond:
            while not self._stopping:
                now = self._clock()
                if now >= next_resync:
                    return True, False, False
                if now >= next_list:
                    return False, False, True
                dirty_at = self._checkpoint_dirty_at
                flagged = self._plugins_changed or self._kubelet_restarted or self._redial
                if flagged or (dirty_at is not None and now >= dirty_at + DEBOUNCE_SECONDS):
                    dirty = dirty_at is not None and now >= dirty_at + DEBOUNCE_SECONDS
                    return False, dirty, False
                call_wait = self._spacer.wait_time()
                if self._need and call_wait == 0:
                    return False, False, False
                timeouts = [next_resync - now, next_list - now]
                if dirty_at is not None:
                    timeouts.append(dirty_at + DEBOUNCE_SECONDS - now)
                if self._need:
                    timeouts.append(call_wait)
                self._cond.wait(timeout=max(0.001, min(timeouts)))
            return False, False, False

    def _take_flags(self) -> tuple[bool, bool, bool]:
        with self._cond:
            flags = (self._plugins_changed, self._kubelet_restarted, self._redial)
            self._plugins_changed = self._kubelet_restarted = self._redial = False
            return flags

    def _run(self) -> None:
        self._watches.ensure()
        self._read_checkpoint()
        next_resync = self._clock() + self._interval
        next_list = self._clock() + self._pods_interval
        while True:
            resync, checkpoint_dirty, list_due = self._wait_for_work(next_resync, next_list)
            if self._stopping:
                return
            if resync:
                next_resync = self._clock() + self._interval
            if resync or list_due:
                next_list = self._clock() + self._pods_interval
                self._need.add(LIST)
            try:
                self._step(resync, checkpoint_dirty)
            except Exception:
                # Whatever went wrong, the reader thread must live on: a dead reader
                # would leave the service with a frozen picture of the node.
                log.exception("kubelet reader error", extra={"event": "kubelet_reader_error"})
                self._spacer.record_call(self._backoff.next_delay())

    def _step(self, resync: bool, checkpoint_dirty: bool) -> None:
        plugins_changed, kubelet_restarted, redial = self._take_flags()
        changed = False
        if redial:
            log.info(
                "podresources socket recreated",
                extra={"event": "podresources_socket_recreated", "action": "redial"},
            )
            self._close_client()
            self._view = replace(self._view, allocatable_supported=True)
        if resync and self._watches.ensure():
            kubelet_restarted = True
        if resync or kubelet_restarted or redial:
            self._need |= {ALLOCATABLE, LIST}
            checkpoint_dirty = True
        if kubelet_restarted or redial:
            # A new kubelet owes nothing to the old one's failures: ask it right away.
            self._backoff.reset()
            self._spacer.forgive()
            self._view = replace(self._view, kubelet_restarted_at=self._clock())
        if plugins_changed:
            self._need.add(ALLOCATABLE)
        if checkpoint_dirty:
            with self._cond:
                self._checkpoint_dirty_at = None
            changed = self._read_checkpoint()
        if self._need and self._spacer.wait_time() == 0:
            changed = self._call_next() or changed
        pending = ALLOCATABLE in self._need and self._view.allocatable_supported
        if pending != self._view.allocatable_pending:
            self._view = replace(self._view, allocatable_pending=pending)
            changed = True
        if changed:
            self._publish()

    def _publish(self) -> None:
        try:
            self._on_change(self._view)
        except Exception:
            # A bug in snapshot building must not stop the agent from reading the kubelet.
            log.exception(
                "kubelet view handler failed", extra={"event": "kubelet_view_handler_failed"}
            )

    # ---- checkpoint --------------------------------------------------------------------------

    def _read_checkpoint(self) -> bool:
        """Read the checkpoint; schedule the calls its changes call for. True if it changed."""
        path = self.paths.checkpoint
        try:
            checkpoint: Checkpoint | None = read_checkpoint(path)
        except CheckpointError as e:
            if path.exists():
                self._metrics.kubelet_errors.labels("checkpoint", "unreadable").inc()
                log.warning(
                    "checkpoint unreadable",
                    extra={"event": "checkpoint_unreadable", "path": path, "error": e},
                )
                # Without it changes cannot be told apart: ask the kubelet for everything.
                self._need |= {ALLOCATABLE, LIST}
                return False
            # No device plugin ever registered on this node (or the kubelet is not up).
            checkpoint = None
        previous = self._view.checkpoint
        if _entry_keys(checkpoint) != _entry_keys(previous):
            self._need.add(LIST)
        if _registered(checkpoint) != _registered(previous):
            self._need.add(ALLOCATABLE)
        if checkpoint == previous:
            return False
        self._view = replace(self._view, checkpoint=checkpoint)
        return True

    # ---- PodResources ------------------------------------------------------------------------

    def _close_client(self) -> None:
        with self._client_lock:
            client, self._client, self._client_socket = self._client, None, None
        if client is not None:
            client.close()

    def _client_for_call(self) -> PodResourcesClient | None:
        socket_path = self.paths.pod_resources_socket
        try:
            st = os.stat(socket_path)
        except OSError:
            self._close_client()
            return None
        identity = (st.st_dev, st.st_ino)
        with self._client_lock:
            if self._stopping:
                return None
            if self._client is not None and self._client_socket == identity:
                return self._client
            stale = self._client
            self._client = PodResourcesClient(
                socket_path,
                dial_timeout=DIAL_TIMEOUT_SECONDS,
                call_timeout=CALL_TIMEOUT_SECONDS,
            )
            self._client_socket = identity
            client = self._client
        if stale is not None:
            # The socket was re-created (kubelet restart): a channel to the old inode would
            # sit in gRPC's reconnect back-off, so dial the new one.
            log.info(
                "podresources redial", extra={"event": "podresources_redial", "socket": socket_path}
            )
            stale.close()
        return client

    def _call_next(self) -> bool:
        """Make the call waiting longest (GetAllocatableResources first on a tie: derived
        health waits for it, and device lists should reach the service before the pods
        holding them); True when the view changed."""
        name = min(self._need, key=lambda n: (self._last_called[n], n != ALLOCATABLE))
        self._last_called[name] = self._clock()
        client = self._client_for_call()
        if client is None:
            if not self._stopping:
                self._failed(name, "UNAVAILABLE", "socket missing")
            return False
        try:
            if name == LIST:
                pods = client.list_pod_resources()
            else:
                allocatable = client.get_allocatable_resources()
        except PodResourcesError as e:
            if self._stopping:
                return False
            if name == ALLOCATABLE and e.code is grpc.StatusCode.UNIMPLEMENTED:
                log.warning(
                    "allocatable unsupported",
                    extra={
                        "event": "allocatable_unsupported",
                        "action": "use_checkpoint_registered_devices",
                    },
                )
                self._need.discard(ALLOCATABLE)
                self._spacer.record_call()
                self._view = replace(self._view, allocatable_supported=False)
                return True
            if e.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                self._close_client()
            self._failed(name, e.code.name if e.code else "UNKNOWN", str(e))
            return False
        self._spacer.record_call()
        self._need.discard(name)
        if self._backoff.failures:
            log.info("kubelet reachable", extra={"event": "kubelet_reachable", "call": name})
        self._backoff.reset()
        self.last_success = self._clock()
        self.last_success_at = time.time()
        self._metrics.kubelet_last_success.set(self.last_success_at)
        now = datetime.now(UTC)
        if name == LIST:
            changed = pods != self._view.pods
            self._view = replace(self._view, pods=pods, observed_at=now)
            return changed
        self._view = replace(self._view, allocatable=allocatable, observed_at=now)
        return True

    def _failed(self, call: str, code: str, detail: str) -> None:
        self._metrics.kubelet_errors.labels(call, code).inc()
        delay = self._backoff.next_delay()
        self._spacer.record_call(delay)
        level = logging.WARNING if self._backoff.failures == 1 else logging.DEBUG
        log.log(
            level,
            "kubelet call failed",
            extra={
                "event": "kubelet_call_failed",
                "call": call,
                "code": code,
                "detail": detail,
                "retry_in": max(delay, self._spacer.gap),
                "failures": self._backoff.failures,
            },
        )
