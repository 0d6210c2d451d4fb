"""The kubelet's topology manager, for one device resource at a time.

Policies (`--topology-manager-policy`, as the kubelet names them):

- ``none`` (the kubelet's default): no NUMA alignment; any free healthy device may be given,
  and the plugin's GetPreferredAllocation alone decides among them;
- ``best-effort``: the devices come from the narrowest set of NUMA nodes (the lowest such
  set) that has enough free ones; the pod is admitted even when that is wider than it could be;
- ``restricted``: as best-effort, but the pod is refused when the narrowest set with enough
  free devices is wider than the narrowest set that could ever hold the request;
- ``single-numa-node``: the devices must all come from one NUMA node, or the pod is refused.

Devices that report no topology take no part: a resource without topology is never refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from devicedeck.sim.kubelet.devices import DeviceInfo

POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
DEFAULT_POLICY = "none"
# The kubelet's TopologyAffinityError message.
AFFINITY_ERROR = "Resources cannot be allocated with Topology locality"


class TopologyAffinityError(Exception):
    pass


def _narrowest(devices: Sequence[DeviceInfo], count: int) -> tuple[int, ...] | None:
    """The smallest (then lowest) set of NUMA nodes holding at least count of the devices."""
    nodes = sorted({n for d in devices for n in d.numa_nodes})
    for size in range(1, len(nodes) + 1):
        for mask in combinations(nodes, size):
            if sum(1 for d in devices if set(d.numa_nodes) & set(mask)) >= count:
                return mask
    return None


def candidates(
    policy: str, free: Sequence[DeviceInfo], healthy: Sequence[DeviceInfo], count: int
) -> list[DeviceInfo]:
    """The free devices a request of `count` may be given under the policy; raises
    TopologyAffinityError when the policy refuses the request."""
    if policy == "none" or not any(d.numa_nodes for d in healthy):
        return list(free)
    achievable = _narrowest(free, count)
    if policy != "best-effort":
        possible = _narrowest(healthy, count)
        widest_allowed = 1 if policy == "single-numa-node" else len(possible or ())
        if achievable is None or possible is None or len(achievable) > widest_allowed:
            raise TopologyAffinityError(AFFINITY_ERROR)
    if achievable is None:
        return list(free)
    return [d for d in free if set(d.numa_nodes) & set(achievable)]
