"""What the oracle compares: the simulators' truth and the service's answer, per device."""

from __future__ import annotations

from dataclasses import dataclass

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


@dataclass(frozen=True, order=True)
class DeviceKey:
    node: str
    resource: str
    device_id: str

    def __str__(self) -> str:
        return f"{self.node} {self.resource} {self.device_id}"


@dataclass(frozen=True)
class TruthDevice:
    """A device its plugin lists now, with the health the plugin gives it."""

    health: str


@dataclass(frozen=True)
class Truth:
    """One reading of the simulators: the nodes that answered, each plugin's devices, and
    which pods hold which devices (a device may be held while its plugin no longer lists
    it). `derived` names the (node, resource) pairs whose health the service can only derive
    from the kubelet (no tapped ListAndWatch stream)."""

    nodes: frozenset[str]
    devices: dict[DeviceKey, TruthDevice]
    holders: dict[DeviceKey, frozenset[str]]
    derived: frozenset[tuple[str, str]]

    def is_derived(self, key: DeviceKey) -> bool:
        return (key.node, key.resource) in self.derived


@dataclass(frozen=True)
class ApiDevice:
    """A device as the service's API gives it."""

    present: bool
    health: str
    health_detail: str | None = None


@dataclass(frozen=True)
class ApiView:
    """One reading of the service: its devices (present or removed) and the pods it says hold
    each device now ("namespace/name")."""

    devices: dict[DeviceKey, ApiDevice]
    holders: dict[DeviceKey, frozenset[str]]


# What a derived Unhealthy device's detail says when the service cannot tell an unhealthy
# device from a removed one: an honest answer when the truth is either.
AMBIGUOUS_DETAIL = "unhealthy or removed"


def says_unhealthy_or_removed(device: ApiDevice) -> bool:
    return (
        device.present
        and device.health == UNHEALTHY
        and AMBIGUOUS_DETAIL in (device.health_detail or "").lower()
    )
