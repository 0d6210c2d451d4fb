"""The cluster watcher: one reflector thread per collection, owned by one background task.

The official client is synchronous, so each watch runs in its own thread. The task started
at service startup owns the threads: cancelling it (at shutdown) stops and joins them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING

from fastapi import FastAPI
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.config import KubeMode, Settings
from devicedeck.db import write_session
from devicedeck.inventory.write.other_writers import mark_status_gap
from devicedeck.kube import dra_sync, node_sync, pod_sync
from devicedeck.kube.client import NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, KubeApi
from devicedeck.kube.errors import KubeUnavailable
from devicedeck.kube.lease import LeaseElection, holder_identity, lease_namespace
from devicedeck.kube.reflector import Reflector, Sync
from devicedeck.kube.service_accounts import ServiceAccountReviewer, parse_service_accounts

if TYPE_CHECKING:
    from devicedeck.runtime.background import BackgroundTasks

log = logging.getLogger(__name__)

SYNCS = (
    Sync(NODES, node_sync.apply_node_list, node_sync.apply_node_event, mark_gap=mark_status_gap),
    Sync(PODS, pod_sync.apply_pod_list, pod_sync.apply_pod_event, pod_sync.requests_devices),
    Sync(RESOURCE_SLICES, dra_sync.apply_slice_list, dra_sync.apply_slice_event),
    Sync(RESOURCE_CLAIMS, dra_sync.apply_claim_list, dra_sync.apply_claim_event),
)
# Allocations can arrive from the agent after their pod was seen: join them on a timer too.
JOIN_EVERY = 15.0
STOP_TIMEOUT = 10.0


class ClusterWatcher:
    def __init__(self, api: KubeApi, factory: sessionmaker[Session], resync: float) -> None:
        self.factory = factory
        self.stop_event = threading.Event()
        self.reflectors = [Reflector(api, sync, factory, resync, self.stop_event) for sync in SYNCS]
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for reflector in self.reflectors:
            thread = threading.Thread(
                target=reflector.run, name=f"kube-watch-{reflector.name}", daemon=True
            )
            thread.start()
            self.threads.append(thread)
        joiner = threading.Thread(target=self._join_loop, name="kube-join", daemon=True)
        joiner.start()
        self.threads.append(joiner)

    def stop(self) -> None:
        self.stop_event.set()
        for reflector in self.reflectors:
            reflector.interrupt()
        deadline = STOP_TIMEOUT
        for thread in self.threads:
            thread.join(timeout=deadline)
            if thread.is_alive():
                log.warning(
                    "cluster watch thread did not stop in time",
                    extra={"event": "cluster_watch_not_stopped", "thread_name": thread.name},
                )

    def _join_loop(self) -> None:
        while not self.stop_event.wait(JOIN_EVERY):
            try:
                with write_session(self.factory) as session:
                    pod_sync.join_allocations(session)
            except SQLAlchemyError as e:
                log.warning(
                    "joining allocations to pods failed; will retry",
                    extra={"event": "pod_join_failed", "error": e},
                )


async def run_watcher(watcher: ClusterWatcher) -> None:
    watcher.start()
    try:
        await asyncio.Future()  # runs until cancelled: leadership lost, or shutdown
    finally:
        await asyncio.to_thread(watcher.stop)


def start_cluster_integration(app: FastAPI, tasks: BackgroundTasks) -> None:
    """Background starter: connect to the API server and watch it, when configured to."""
    settings: Settings = app.state.settings
    app.state.kube_api = None
    app.state.kube_problem = None
    app.state.service_account_reviewer = None
    if settings.kube is KubeMode.OFF:
        return
    try:
        api = KubeApi.from_settings(settings)
    except KubeUnavailable as e:
        log.error(
            "cluster integration not started: %s",
            e.message,
            extra={"event": "cluster_integration_failed"},
        )
        app.state.kube_problem = e.message
        return
    app.state.kube_api = api
    app.state.service_account_reviewer = ServiceAccountReviewer(
        api, parse_service_accounts(settings.agent_service_accounts)
    )
    log.info(
        "cluster integration started",
        extra={
            "event": "cluster_integration_started",
            "mode": settings.kube.value,
            "host": api.host,
        },
    )
    # With cluster access the replicas elect their leader with a Lease, not the database.
    tasks.elect_with(
        LeaseElection(api, lease_namespace(settings), settings.leader_lease_name, holder_identity())
    )
    # The admin routes use the client on every replica; the leader watches, with a new
    # watcher each time it becomes the leader (a stopped one stays stopped).
    tasks.start_once(
        lambda: run_watcher(ClusterWatcher(api, app.state.session_factory, settings.kube_resync)),
        name="kube-watcher",
    )
    tasks.at_stop(api.close)
