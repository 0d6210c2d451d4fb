"""Leader election through a coordination.k8s.io/v1 Lease, used when cluster access is on.

The rules are client-go's: a candidate reads the Lease; it may take it when no one holds it,
or when the holder's record has not changed for leaseDurationSeconds of the candidate's own
clock (no clocks are compared across replicas); every write carries the resourceVersion read,
so of two candidates that read the same version one write wins and the other gets 409
Conflict. The leader renews every RETRY_SECONDS and stops its work when the Lease shows another
holder, or when it has not managed to renew for RENEW_DEADLINE seconds, which is shorter than
the duration others wait: by the time another may take over, the old leader has stopped. A
leader stopping cleanly gives the Lease up (no holder), so the next one takes over at once.

The client's own `kubernetes.leaderelection` is not used: it blocks a thread in sleeps that
cannot be interrupted, never gives the Lease up, exits the process on a bad setting and reads
the global client configuration; see DESIGN-NOTES.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from devicedeck.config import KubeMode, Settings
from devicedeck.kube.client import KubeApi
from devicedeck.kube.errors import ApiStatus, ApiUnreachable
from devicedeck.runtime.leadership import stop_work

log = logging.getLogger(__name__)

LEASE_DURATION_SECONDS = 15
RENEW_DEADLINE = 10.0
RETRY_SECONDS = 2.0
# Followers spread their attempts over up to this fraction of RETRY_SECONDS more.
JITTER = 0.2
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def lease_namespace(settings: Settings, in_cluster_file: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The setting, else the pod's own namespace (in cluster) or the kubeconfig context's."""
    if settings.leader_lease_namespace:
        return settings.leader_lease_namespace
    if settings.kube is KubeMode.INCLUSTER:
        with contextlib.suppress(OSError):
            own = in_cluster_file.read_text().strip()
            if own:
                return own
    elif settings.kube is KubeMode.KUBECONFIG:
        with contextlib.suppress(ConfigException, OSError, ValueError, TypeError):
            _, active = k8s_config.list_kube_config_contexts(config_file=settings.kubeconfig)
            namespace = ((active or {}).get("context") or {}).get("namespace")
            if namespace:
                return str(namespace)
    return "default"


def holder_identity() -> str:
    """This process among all candidates: the pod's name (its hostname) and the process id,
    which tells the workers of one `serve --workers N` apart."""
    return f"{socket.gethostname()}_{os.getpid()}"


def micro_time() -> str:
    """Now as a MicroTime, the format of a Lease's acquireTime and renewTime."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElection:
    """Runs `work` while this process holds the Lease; `leading` says whether it does now."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: int = LEASE_DURATION_SECONDS,
        renew_deadline: float = RENEW_DEADLINE,
        retry: float = RETRY_SECONDS,
    ) -> None:
        if not retry < renew_deadline < lease_duration:
            raise ValueError("a lease needs retry < renew deadline < lease duration")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry = retry
        self.leading = False
        # The Lease as last read or written, its spec when it last changed, and when (on
        # this process's monotonic clock) that change was seen.
        self._lease: dict[str, Any] | None = None
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._last_problem = ""

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def run(self, work: Callable[[], Awaitable[None]]) -> None:
        log.info(
            "electing the leader with coordination.k8s.io/v1",
            extra={
                "event": "leader_election_started",
                "lease": self.where,
                "identity": self.identity,
            },
        )
        try:
            while True:
                if await self.try_acquire_or_renew():
                    await self._lead(work)
                    await self._release()
                await asyncio.sleep(self.retry * (1 + random.random() * JITTER))
        finally:
            # Stopping (shutdown): the work has stopped, so another may start it now.
            await self._release()

    async def _lead(self, work: Callable[[], Awaitable[None]]) -> None:
        """Runs work until it ends, the Lease is lost, or renewing fails for too long."""
        self.leading = True
        log.info(
            "leading: this process runs the stale sweep and the cluster watcher",
            extra={"event": "leading", "lease": self.where, "identity": self.identity},
        )
        task = asyncio.ensure_future(work())
        renewed = time.monotonic()
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=self.retry)
                if task.done():
                    break
                if await self.try_acquire_or_renew():
                    renewed = time.monotonic()
                elif not self.holds():
                    log.warning(
                        "lease %s is held by %s now; stopping the work only the leader does",
                        self.where,
                        self.holder(),
                        extra={"event": "leadership_lost"},
                    )
                    break
                elif time.monotonic() - renewed >= self.renew_deadline:
                    log.warning(
                        "lease %s not renewed for %.0f s; stopping the work only the leader does",
                        self.where,
                        self.renew_deadline,
                        extra={"event": "leadership_lost"},
                    )
                    break
        finally:
            self.leading = False
            await stop_work(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "leader work failed",
                exc_info=task.exception(),
                extra={"event": "leader_work_failed"},
            )

    def holder(self) -> str:
        spec = (self._lease or {}).get("spec") or {}
        return str(spec.get("holderIdentity") or "")

    def holds(self) -> bool:
        """Whether the Lease as last seen names this process."""
        return self._lease is not None and self.holder() == self.identity

    async def try_acquire_or_renew(self) -> bool:
        """One attempt to take or renew the Lease; True if this process holds it now."""
        try:
            current = await asyncio.to_thread(self.api.read_lease, self.namespace, self.name)
            if current is None:
                body = {"metadata": {"name": self.name}, "spec": self._record(None)}
                self._seen(await asyncio.to_thread(self.api.create_lease, self.namespace, body))
                return True
            self._seen(current)
            spec = current.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            if holder and holder != self.identity and not self._expired(spec):
                return False
            wanted = copy.deepcopy(current)
            wanted["spec"] = self._record(spec)  # keeps the resourceVersion read
            self._seen(
                await asyncio.to_thread(self.api.replace_lease, self.namespace, self.name, wanted)
            )
        except ApiStatus as e:
            if e.code != 409:
                self._problem(f"{e.code} {e.reason}: {e.message}")
                return False
            # Another candidate wrote first (AlreadyExists, or Conflict on a stale
            # resourceVersion): what it wrote decides, so read it now.
            log.info(
                "lease %s was written by another replica first (%s)",
                self.where,
                e.reason,
                extra={"event": "lease_conflict"},
            )
            with contextlib.suppress(ApiStatus, ApiUnreachable):
                lease = await asyncio.to_thread(self.api.read_lease, self.namespace, self.name)
                if lease is not None:
                    self._seen(lease)
            return False
        except ApiUnreachable as e:
            self._problem(str(e))
            return False
        self._last_problem = ""
        return True

    def _seen(self, lease: dict[str, Any]) -> None:
        self._lease = lease
        spec = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._observed_spec = copy.deepcopy(spec)
            self._observed_at = time.monotonic()

    def _expired(self, spec: dict[str, Any]) -> bool:
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        return time.monotonic() >= self._observed_at + float(duration)

    def _record(self, old: dict[str, Any] | None) -> dict[str, Any]:
        """The spec this process writes: renewing keeps when it acquired the Lease; taking it
        over counts one more transition."""
        now = micro_time()
        old = old or {}
        transitions = int(old.get("leaseTransitions") or 0)
        if old.get("holderIdentity") == self.identity:
            acquired = old.get("acquireTime") or now
        else:
            acquired = now
            transitions = transitions + 1 if old else 0
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_duration,
            "acquireTime": acquired,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _release(self) -> None:
        """Give the Lease up, if this process holds it, so another need not wait it out."""
        # Twice at most: a renewal still in flight when the leader was stopped may have
        # changed the version last seen; the Lease read afresh says whether it is still ours.
        for _ in range(2):
            if not self.holds():
                return
            assert self._lease is not None
            released = copy.deepcopy(self._lease)
            now = micro_time()
            spec = released.get("spec") or {}
            released["spec"] = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": int(spec.get("leaseTransitions") or 0),
            }
            try:
                self._seen(
                    await asyncio.to_thread(
                        self.api.replace_lease, self.namespace, self.name, released
                    )
                )
                log.info("lease %s given up", self.where, extra={"event": "lease_given_up"})
                return
            except ApiStatus as e:
                if e.code != 409:
                    break
                with contextlib.suppress(ApiStatus, ApiUnreachable):
                    self._lease = await asyncio.to_thread(
                        self.api.read_lease, self.namespace, self.name
                    )
            except ApiUnreachable:
                break
        if self.holds():
            # The API server is away: the Lease runs out by itself.
            log.warning(
                "lease %s not given up; it expires by itself",
                self.where,
                extra={"event": "lease_not_given_up"},
            )
        self._lease = None

    def _problem(self, message: str) -> None:
        """Log a failed attempt once until it changes, not on every retry."""
        if message != self._last_problem:
            log.warning(
                "lease %s cannot be read or written: %s; retrying",
                self.where,
                message,
                extra={"event": "lease_unavailable"},
            )
            self._last_problem = message
