"""Values and limits of the inventory's fields, in one place: the domain, the API's query
parameters and the dashboard's forms all take them from here."""

from __future__ import annotations

import json
from functools import lru_cache

# Health as the kubelet means it: the exact string "Healthy", anything else is unhealthy;
# Unknown is a device whose node stopped reporting, or one no plugin has described yet.
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNKNOWN = "Unknown"
HEALTH_VALUES = (HEALTHY, UNHEALTHY, UNKNOWN)

# A device row is never deleted: it is present, or removed (and may reappear).
PRESENT = "present"
REMOVED = "removed"
# A present row whose device may be removed: its health is derived, the kubelet does not offer
# it, and the Node's counts cannot say whether it is unhealthy or gone. A filter value and
# what the API's `presence` reads; stored as a present row with `presence_uncertain`.
UNHEALTHY_OR_REMOVED = "unhealthy_or_removed"

# Lengths of names as Kubernetes limits them (and the columns hold them).
NAME_MAX = 253  # a node, pod or container name, a device ID: DNS-1123 subdomain length
RESOURCE_MAX = 316  # an extended resource name: a 253-character prefix, "/", a 63-character name
NAMESPACE_MAX = 63  # a namespace: DNS-1123 label length
CURSOR_MAX = 2048


@lru_cache(maxsize=256)
def numa_nodes_of(text: str) -> tuple[int, ...]:
    """A device's NUMA nodes from the JSON text of its column. Lists read many devices with a
    handful of distinct values: each is decoded once, rather than the driver decoding each
    row's JSON."""
    return tuple(json.loads(text))
