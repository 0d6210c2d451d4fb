"""Device health derived from kubelet data, for resources whose plugin stream is not tapped.

GetAllocatableResources lists a resource's healthy devices only, so a device the node knows
but does not offer is unhealthy. A resource's devices are everything the kubelet shows in
any form: allocatable, allocated to a pod, registered in the checkpoint, and every device
seen before. Each is Healthy when allocatable, Unhealthy otherwise. Remembering devices
seen before matters: a failed device simply vanishes from allocatable, and without memory
the service would record it as removed instead of unhealthy.

A kubelet that restarts offers nothing until each plugin has registered again, which would
read as every device failing at once. For a bounded time after a restart
(KUBELET_RESTART_HOLD_SECONDS), a resource the kubelet offers nothing of keeps the last offer
seen before. A plugin sends its whole list on registering, so once the kubelet offers any
device of the resource the plugin is back, and from then on the offer is believed as it is,
empty or not: a device that fails, or that failed while the kubelet was down, shows as soon
as the plugin is back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from devicedeck.agent.snapshots import HEALTHY, UNHEALTHY, NumaMap, device_json

# Long enough for a restarted kubelet's plugins to register again and its devices to be
# offered; short enough that a device failing meanwhile is not hidden for long.
KUBELET_RESTART_HOLD_SECONDS = 60.0


class DerivedHealth:
    def __init__(self) -> None:
        # resource -> device ID -> last known NUMA nodes
        self._seen: dict[str, dict[str, tuple[int, ...]]] = {}
        # resource -> the devices last offered, outside a hold after a kubelet restart
        self._offered: dict[str, set[str]] = {}
        # The kubelet restart being held for, and the resources offered something since it.
        self._restart: float | None = None
        self._back: set[str] = set()

    def remember(self, resource: str, device_id: str, numa: Iterable[int] = ()) -> None:
        devices = self._seen.setdefault(resource, {})
        nodes = tuple(sorted(set(numa)))
        if nodes or device_id not in devices:
            devices[device_id] = nodes

    def known(self, resource: str) -> set[str]:
        return set(self._seen.get(resource, {}))

    def resources(self) -> set[str]:
        return set(self._seen)

    def devices(
        self,
        *,
        healthy: Mapping[str, set[str]],
        allocated: Mapping[str, set[str]],
        registered: Mapping[str, Iterable[str]],
        numa: NumaMap,
        holding_since: float | None = None,
    ) -> dict[str, list[dict[str, Any]]]:
        """Each resource's devices with derived health; updates the memory of seen devices.
        `holding_since`: when the kubelet restarted, if lately: a resource offered nothing
        since then may have a plugin that has not registered again yet."""
        if holding_since != self._restart:
            self._restart = holding_since
            self._back = set()
        for source in (healthy, allocated, registered):
            for resource, ids in source.items():
                # A resource the checkpoint names with no healthy device is still reported
                # (an empty list): an agent started after its last device failed knows no
                # device of it, and without a list the service would keep the last it had.
                self._seen.setdefault(resource, {})
                for device_id in ids:
                    self.remember(resource, device_id, numa.get((resource, device_id), ()))
        result: dict[str, list[dict[str, Any]]] = {}
        for resource, devices in sorted(self._seen.items()):
            offered = healthy.get(resource, set())
            last = self._offered.get(resource, set())
            if offered:
                self._back.add(resource)
            if holding_since is not None and resource not in self._back:
                offered = last
            else:
                self._offered[resource] = set(offered)
            result[resource] = [
                device_json(device_id, HEALTHY if device_id in offered else UNHEALTHY, nodes)
                for device_id, nodes in sorted(devices.items())
            ]
        return result
