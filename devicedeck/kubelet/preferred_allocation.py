"""NUMA-aware choice of devices for GetPreferredAllocation.

Kept apart from the server so the policy can be tested and reused on its own. The
policy: keep the devices the kubelet says must be included, then fill the rest from a
single NUMA node if one has room (preferring nodes the required devices already sit on,
then the node with the fewest free devices, so larger free blocks stay whole); otherwise
spread over as few NUMA nodes as possible. Devices without topology come last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def choose_preferred_devices(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    numa_nodes_of: Mapping[str, Sequence[int]],
) -> list[str]:
    """Pick `size` device ids from `available`, always including `must_include`.

    numa_nodes_of maps a device id to its NUMA nodes (empty or missing: no topology).
    The order of `available` breaks every tie, so the result is deterministic.
    """
    chosen: list[str] = []
    for device_id in must_include:
        if device_id not in chosen:
            chosen.append(device_id)
    if len(chosen) >= size:
        return chosen
    remaining = size - len(chosen)
    candidates = [d for d in dict.fromkeys(available) if d not in chosen]
    if len(candidates) <= remaining:
        return chosen + candidates

    numa_groups: dict[int, list[str]] = {}
    without_topology: list[str] = []
    for device_id in candidates:
        nodes = numa_nodes_of.get(device_id, ())
        if not nodes:
            without_topology.append(device_id)
        for node in nodes:
            numa_groups.setdefault(node, []).append(device_id)
    required_nodes = {n for d in chosen for n in numa_nodes_of.get(d, ())}

    fitting = [n for n, ids in numa_groups.items() if len(ids) >= remaining]
    if fitting:
        best = min(
            fitting,
            key=lambda n: (n not in required_nodes, len(numa_groups[n]), n),
        )
        return chosen + numa_groups[best][:remaining]

    # No single node has room: take the largest groups first, which needs the fewest
    # nodes when groups do not overlap; the required devices' nodes win ties. Devices
    # without topology come last.
    order = sorted(
        numa_groups,
        key=lambda n: (-len(numa_groups[n]), n not in required_nodes, n),
    )
    picked: dict[str, None] = {}
    for group in [*(numa_groups[n] for n in order), without_topology]:
        for device_id in group:
            picked.setdefault(device_id, None)
            if len(picked) == remaining:
                return chosen + list(picked)
    return chosen + list(picked)
