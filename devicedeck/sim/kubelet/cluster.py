"""The simulated kubelet's side of the API server: its Node and the Pods it runs.

As the kubelet does, it registers its Node (label kubernetes.io/hostname) and keeps the
Node's status: for every device-plugin resource, capacity counts all devices and allocatable
the healthy ones (a resource whose plugin is gone past the grace period shows 0), written when
that changes and at least every STATUS_UPDATE_SECONDS. Extended resources someone else put
into the Node's capacity (the documented curl patch) are left alone, and their capacity is
copied into allocatable on the next update; an allocatable entry whose capacity was removed
goes too.

Pods: the Pod object is created first, so that the kubelet admits the pod under the uid the
API server gave it (PodResources and the checkpoint then name the same uid), then marked
Running; a pod the kubelet refuses has its Pod object deleted again, and so does a pod that
goes. Pod objects it created that it no longer runs (the pod went while it was down) are
deleted when it notices.

It renews its node's Lease in kube-node-lease (the heartbeat `kubectl describe node` shows)
and reports events: Starting and NodeReady when it starts, NodeNotSchedulable and
NodeSchedulable when it sees its node cordoned or uncordoned (at its next status update),
Started for a pod it runs and a Warning for one it refuses.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from devicedeck.sim.kubeclient import KubeClient, KubeClientError
from devicedeck.sim.kubelet.admission import AdmissionError
from devicedeck.sim.kubelet.devices import DeviceManager
from devicedeck.sim.kubelet.heartbeat import EventRecorder, NodeLease
from devicedeck.sim.kubelet.node_object import (
    CONDITION_ORDER,
    NATIVE_RESOURCES,
    SIM_LABEL,
    conditions,
    node_object,
    now_text,
)
from devicedeck.sim.kubelet.pods import ContainerSpec, Pod

log = logging.getLogger(__name__)

STATUS_UPDATE_SECONDS = 10.0
CHECK_SECONDS = 0.5

Admit = Callable[[str, str, Sequence[ContainerSpec], str], Pod]


def is_extended(resource: str) -> bool:
    return resource not in NATIVE_RESOURCES and not resource.startswith("hugepages-")


def pod_object(
    pod_namespace: str, name: str, node: str, containers: Sequence[ContainerSpec]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": pod_namespace, "name": name, "labels": {SIM_LABEL: "true"}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Always",
            "containers": [
                {
                    "name": c.name,
                    "image": "devicedeck/sim-workload:1",
                    "resources": {
                        "requests": {r: str(n) for r, n in sorted(c.requests.items())},
                        "limits": {r: str(n) for r, n in sorted(c.requests.items())},
                    },
                }
                for c in containers
            ],
        },
    }


def running_status(pod: Pod) -> dict[str, Any]:
    started = now_text()
    return {
        "status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "startTime": started,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": started}],
            "containerStatuses": [
                {
                    "name": c.name,
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "image": "devicedeck/sim-workload:1",
                    "state": {"running": {"startedAt": started}},
                }
                for c in pod.containers
            ],
        }
    }


class ClusterMember:
    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        manager: DeviceManager,
        active_pods: Callable[[], list[Pod]],
        *,
        update_seconds: float = STATUS_UPDATE_SECONDS,
        check_seconds: float = CHECK_SECONDS,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self._manager = manager
        self._active_pods = active_pods
        self._update_seconds = update_seconds
        self._check_seconds = check_seconds
        self._registered = False
        self._sent: tuple[dict[str, int], dict[str, int]] | None = None
        self._sent_at = 0.0
        self._ready_since = now_text()
        self._boot_id = str(uuid.uuid4())
        self._node_uid: str | None = None
        # Whether the node was cordoned when this kubelet last looked; None before it looked.
        self._unschedulable: bool | None = None
        self.lease = NodeLease(client, node_name)
        self.events = EventRecorder(client, node_name)
        # Held from a Pod object's creation until its pod is admitted or refused, so the
        # clean-up of orphaned Pod objects never takes one that is being admitted.
        self._pods_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="sim-kubelet node-status", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        delay = self._check_seconds
        while not self._stop.is_set():
            try:
                self.sync()
                delay = self._check_seconds
            except KubeClientError as e:
                log.warning(
                    "node status not written",
                    extra={"node": self.node_name, "retry_in": delay, "error": e},
                )
                self._registered = self._registered and e.code != 404
                self._sent = None
                # An API server that is down is retried less and less often, up to the
                # status update period.
                delay = min(delay * 2, self._update_seconds)
            self._stop.wait(delay)

    def sync(self, force: bool = False) -> None:
        """Register the node if needed, write its status if it changed or is due, and renew
        its lease when due."""
        if not self._registered:
            self._register()
        state = (self._manager.capacity(), self._manager.allocatable())
        due = time.monotonic() - self._sent_at >= self._update_seconds
        if force or due or state != self._sent:
            self._update(*state)
            if due:
                self._remove_orphans()
        if self.lease.due:
            self.lease.renew(self._node_uid)

    def _register(self) -> None:
        self.events.node_event("Starting", "Starting kubelet.")
        try:
            self.client.create_node(node_object(self.node_name, self._ready_since, self._boot_id))
            log.info("node registered", extra={"node": self.node_name})
        except KubeClientError as e:
            if e.reason != "AlreadyExists":
                raise
        self._registered = True
        self.events.node_event("NodeReady", f"Node {self.node_name} status is now: NodeReady")

    def _update(self, capacity: dict[str, int], allocatable: dict[str, int]) -> None:
        current = self.client.get_node(self.node_name)
        self._node_uid = (current.get("metadata") or {}).get("uid")
        self._notice_cordon((current.get("spec") or {}).get("unschedulable") is True)
        status = current.get("status") or {}
        current_capacity: dict[str, str] = status.get("capacity") or {}
        current_allocatable: dict[str, str] = status.get("allocatable") or {}
        new_capacity: dict[str, Any] = {r: str(n) for r, n in capacity.items()}
        new_allocatable: dict[str, Any] = {r: str(n) for r, n in allocatable.items()}
        for resource, quantity in current_capacity.items():
            if is_extended(resource) and resource not in capacity:
                # Advertised by someone else: the kubelet copies it into allocatable.
                new_allocatable[resource] = quantity
        for resource in current_allocatable:
            if (
                is_extended(resource)
                and resource not in current_capacity
                and resource not in capacity
            ):
                new_allocatable[resource] = None
        patch = {
            "status": {
                "$setElementOrder/conditions": CONDITION_ORDER,
                "capacity": new_capacity,
                "allocatable": new_allocatable,
                "conditions": conditions(self._ready_since),
            }
        }
        self.client.patch_node_status(self.node_name, patch)
        self._sent = (capacity, allocatable)
        self._sent_at = time.monotonic()

    def _notice_cordon(self, unschedulable: bool) -> None:
        if self._unschedulable is not None and unschedulable != self._unschedulable:
            word = "NodeNotSchedulable" if unschedulable else "NodeSchedulable"
            self.events.node_event(word, f"Node {self.node_name} status is now: {word}")
        self._unschedulable = unschedulable

    # --- pods ---------------------------------------------------------------------------

    def admit(
        self, namespace: str, name: str, containers: Sequence[ContainerSpec], admit: Admit
    ) -> Pod:
        with self._pods_lock:
            try:
                created = self.client.create_pod(
                    pod_object(namespace, name, self.node_name, containers)
                )
            except KubeClientError as e:
                raise AdmissionError(
                    f"pod {namespace}/{name}: the API server did not take the Pod: {e}"
                ) from e
            uid = str(created["metadata"]["uid"])
            try:
                pod = admit(namespace, name, containers, uid)
            except AdmissionError as e:
                self.events.pod_event(created, "UnexpectedAdmissionError", str(e), "Warning")
                self._delete(namespace, name, uid)
                raise
            except BaseException:
                self._delete(namespace, name, uid)
                raise
        try:
            self.client.patch_pod_status(namespace, name, running_status(pod))
        except KubeClientError as e:
            log.warning("pod status not written", extra={"pod": pod.key, "error": e})
        names = ", ".join(c.name for c in containers)
        self.events.pod_event(created, "Started", f"Started container {names}")
        return pod

    def pod_gone(self, pod: Pod) -> None:
        self._delete(pod.namespace, pod.name, pod.uid)

    def _delete(self, namespace: str, name: str, uid: str) -> None:
        try:
            self.client.delete_pod(namespace, name, uid)
        except KubeClientError as e:
            log.warning(
                "pod object not deleted",
                extra={"namespace": namespace, "pod": name, "error": e},
            )

    def _remove_orphans(self) -> None:
        with self._pods_lock:
            running = {p.uid for p in self._active_pods()}
            for obj in self.client.pods_on_node(self.node_name):
                metadata = obj["metadata"]
                ours = (metadata.get("labels") or {}).get(SIM_LABEL) == "true"
                if ours and metadata.get("uid") not in running:
                    log.info(
                        "orphaned pod object deleted",
                        extra={"namespace": metadata["namespace"], "pod": metadata["name"]},
                    )
                    self._delete(metadata["namespace"], metadata["name"], metadata["uid"])
