"""The node lifecycle controller's heartbeat check, inside the simulated API server.

A node whose kubelet has not renewed its Lease in kube-node-lease for the grace period is
marked as the controller marks it: its conditions become Unknown ("Kubelet stopped posting
node status."), which brings the unreachable taint. The kubelet's next status update, once
it is back, sets them again. Nodes without a lease are left alone.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from devicedeck.sim.apiserver.patches import STRATEGIC_MERGE_PATCH
from devicedeck.sim.apiserver.printers import parse_time
from devicedeck.sim.apiserver.resources import LEASES, NODES
from devicedeck.sim.apiserver.store import Store, now_text, object_key

log = logging.getLogger(__name__)

# The controller's default node-monitor-grace-period.
GRACE_SECONDS = 50.0
NODE_LEASE_NAMESPACE = "kube-node-lease"
UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."


class NodeLifecycle:
    def __init__(self, store: Store, grace_seconds: float = GRACE_SECONDS) -> None:
        self.store = store
        self.grace_seconds = grace_seconds

    def check(self, now: datetime | None = None) -> list[str]:
        """Mark the nodes whose leases ran out; their names."""
        now = now or datetime.now(UTC)
        marked = []
        with self.store.cond:
            nodes = list(self.store.objects[NODES.plural].values())
            for node in nodes:
                name = node["metadata"]["name"]
                lease = self.store.objects[LEASES.plural].get(
                    object_key(LEASES, NODE_LEASE_NAMESPACE, name)
                )
                renewed = parse_time(((lease or {}).get("spec") or {}).get("renewTime"))
                if renewed is None or (now - renewed).total_seconds() <= self.grace_seconds:
                    continue
                if self._mark_unknown(node):
                    marked.append(name)
        return marked

    def _mark_unknown(self, node: dict[str, Any]) -> bool:
        conditions = (node.get("status") or {}).get("conditions") or []
        stale = [c for c in conditions if isinstance(c, dict) and c.get("status") != "Unknown"]
        if not stale:
            return False
        now = now_text()
        patch = {
            "status": {
                "conditions": [
                    {
                        "type": c.get("type"),
                        "status": "Unknown",
                        "reason": UNKNOWN_REASON,
                        "message": UNKNOWN_MESSAGE,
                        "lastTransitionTime": now,
                    }
                    for c in stale
                ]
            }
        }
        name = node["metadata"]["name"]
        self.store.update(
            NODES,
            None,
            name,
            patch,
            subresource="status",
            content_type=STRATEGIC_MERGE_PATCH,
        )
        log.info("node marked unknown", extra={"node": name, "grace_seconds": self.grace_seconds})
        return True
