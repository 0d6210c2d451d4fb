"""The simulated kubelet's heartbeat and its voice: the node's Lease in kube-node-lease,
renewed every RENEW_SECONDS as the kubelet renews its own, and the events it reports
(core/v1 Events, as the kubelet's event recorder writes them)."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from devicedeck.sim.kubeclient import KubeClient, KubeClientError

log = logging.getLogger(__name__)

NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
# The kubelet renews its lease at a quarter of the lease's duration.
RENEW_SECONDS = LEASE_DURATION_SECONDS / 4
COMPONENT = "kubelet"
NODE_EVENTS_NAMESPACE = "default"


def micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeLease:
    def __init__(self, client: KubeClient, node_name: str) -> None:
        self.client = client
        self.node_name = node_name
        self._lease: dict[str, Any] | None = None
        self._renewed_at = 0.0

    @property
    def due(self) -> bool:
        return time.monotonic() - self._renewed_at >= RENEW_SECONDS

    def renew(self, node_uid: str | None) -> None:
        """Create or renew the lease; KubeClientError when the API server refuses."""
        lease = self._lease
        if lease is None:
            try:
                lease = self.client.get_lease(NODE_LEASE_NAMESPACE, self.node_name)
            except KubeClientError as e:
                if e.code != 404:
                    raise
        now = micro_time()
        if lease is None:
            lease = self.client.create_lease(self._new(now, node_uid))
        else:
            lease["spec"] = {**(lease.get("spec") or {}), "renewTime": now}
            lease["spec"]["holderIdentity"] = self.node_name
            lease["spec"]["leaseDurationSeconds"] = LEASE_DURATION_SECONDS
            try:
                lease = self.client.replace_lease(lease)
            except KubeClientError as e:
                # Someone else wrote it (or it went): read it again next time.
                self._lease = None
                if e.code not in (404, 409):
                    raise
                return
        self._lease = lease
        self._renewed_at = time.monotonic()

    def _new(self, now: str, node_uid: str | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.node_name, "namespace": NODE_LEASE_NAMESPACE}
        if node_uid:
            metadata["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": node_uid}
            ]
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.node_name,
                "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                "renewTime": now,
            },
        }


class EventRecorder:
    """Events about the node and its pods; one that cannot be written is only logged."""

    def __init__(self, client: KubeClient, node_name: str) -> None:
        self.client = client
        self.node_name = node_name

    def node_event(self, reason: str, message: str, kind: str = "Normal") -> None:
        # The kubelet names its node by name in the uid field too.
        involved = {"kind": "Node", "name": self.node_name, "uid": self.node_name}
        self._write(NODE_EVENTS_NAMESPACE, involved, reason, message, kind)

    def pod_event(
        self, pod: dict[str, Any], reason: str, message: str, kind: str = "Normal"
    ) -> None:
        metadata = pod["metadata"]
        involved = {
            "kind": "Pod",
            "namespace": metadata["namespace"],
            "name": metadata["name"],
            "uid": metadata.get("uid", ""),
            "apiVersion": "v1",
        }
        self._write(metadata["namespace"], involved, reason, message, kind)

    def _write(
        self, namespace: str, involved: dict[str, Any], reason: str, message: str, kind: str
    ) -> None:
        now = datetime.now(UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{involved['name']}.{time.time_ns():x}",
                "namespace": namespace,
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": COMPONENT, "host": self.node_name},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": COMPONENT,
            "reportingInstance": self.node_name,
        }
        try:
            self.client.create_event(event)
        except KubeClientError as e:
            log.warning(
                "event not written",
                extra={"node": self.node_name, "reason": reason, "error": e},
            )
