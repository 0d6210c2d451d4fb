"""The oracle's seeded workload: one random action at a time, chosen with a generator seeded
by --seed from what the simulators hold at that moment.

Device actions (health flaps, unplugs, plug-backs) and pods (created, deleted) go through
the simulated nodes' control sockets; restarts kill a process (the agent with SIGKILL, the
kubelet, the service and the API server with SIGTERM) and the supervision starts it again.
Only one restart is under way at a time, so each is judged on its own."""

from __future__ import annotations

import random
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devicedeck.sim.kubelet.control import ControlError, call, control_socket_path
from devicedeck.truth.model import HEALTHY, UNHEALTHY, DeviceKey

NAMESPACE = "truth"
# At most this many of a plugin's devices are unplugged at once, so pods still find room.
MAX_UNPLUGGED = 2
MAX_PODS_PER_NODE = 6

FLAP, UNPLUG, PLUG = "flap", "unplug", "plug"
POD_CREATE, POD_DELETE = "pod-create", "pod-delete"
KILL_AGENT, RESTART_KUBELET = "kill-agent", "restart-kubelet"
RESTART_SERVICE, RESTART_APISERVER = "restart-service", "restart-apiserver"
WEIGHTS: dict[str, int] = {
    FLAP: 30,
    UNPLUG: 8,
    PLUG: 8,
    POD_CREATE: 25,
    POD_DELETE: 20,
    KILL_AGENT: 3,
    RESTART_KUBELET: 2,
    RESTART_SERVICE: 2,
    RESTART_APISERVER: 2,
}
RESTARTS = frozenset({KILL_AGENT, RESTART_KUBELET, RESTART_SERVICE, RESTART_APISERVER})


@dataclass
class Taken:
    """What an action did: its kind, a line for the log, the device it changed (with the
    state it set), and the process it killed (with the nodes that affects)."""

    kind: str
    text: str
    device: DeviceKey | None = None
    device_action: str | None = None
    killed: str | None = None
    node: str | None = None


@dataclass
class Tally:
    taken: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        """Actions taken; refused ones are tried again with another choice."""
        return sum(self.taken.values())


# (member name, signal, node or None for every node) of each restart, by node name.
Restarter = Callable[[str, str, signal.Signals], bool]


class Workload:
    def __init__(
        self,
        seed: int,
        roots: dict[str, Path],
        known_devices: Callable[[str, str], list[str]],
        restart: Restarter,
        restarts_allowed: Callable[[], bool],
    ) -> None:
        self.random = random.Random(seed)
        self.roots = roots
        self.known_devices = known_devices
        self.restart = restart
        self.restarts_allowed = restarts_allowed
        self.tally = Tally()
        # Why actions could not be taken (a node restarting, admission refusing a pod).
        self.refusals: list[str] = []
        self._pod_number = 0

    def step(self) -> Taken | None:
        """Choose and take one action; None when it was refused or could not be taken."""
        kinds = [k for k in WEIGHTS if k not in RESTARTS or self.restarts_allowed()]
        kind = self.random.choices(kinds, weights=[WEIGHTS[k] for k in kinds])[0]
        node = self.random.choice(sorted(self.roots))
        try:
            taken = self._take(kind, node)
        except (ControlError, OSError, ValueError, KeyError) as e:
            self.refusals.append(f"{kind} {node}: {e}")
            taken = None
        if taken is None:
            self.tally.refused[kind] += 1
        else:
            # A plug with nothing to plug back flaps instead: counted as what it did.
            self.tally.taken[taken.kind] += 1
        return taken

    def _call(self, node: str, request: dict[str, Any]) -> Any:
        return call(control_socket_path(self.roots[node]), request, timeout=30)

    def _take(self, kind: str, node: str) -> Taken | None:
        if kind in RESTARTS:
            return self._restart(kind, node)
        if kind in (POD_CREATE, POD_DELETE):
            return self._pod(kind, node)
        plugins = self._call(node, {"op": "plugin.status"})["plugins"]
        if not plugins:
            return None  # the node is starting: its plugins are not there yet
        resource = self.random.choice(sorted(plugins))
        present = {d["id"]: d["health"] for d in plugins[resource]["devices"]}
        absent = sorted(set(self.known_devices(node, resource)) - set(present))
        if kind == PLUG and absent:
            device_id = self.random.choice(absent)
            self._call(node, {"op": "device.plug", "resource": resource, "device_id": device_id})
            return self._device(PLUG, node, resource, device_id, "plug")
        if kind == UNPLUG and len(absent) < MAX_UNPLUGGED and present:
            device_id = self.random.choice(sorted(present))
            request = {"op": "device.unplug", "resource": resource, "device_id": device_id}
            self._call(node, request)
            return self._device(UNPLUG, node, resource, device_id, "unplug")
        if not present:
            return None
        device_id = self.random.choice(sorted(present))
        health = UNHEALTHY if present[device_id] == HEALTHY else HEALTHY
        request = {
            "op": "device.health",
            "resource": resource,
            "device_id": device_id,
            "health": health,
        }
        self._call(node, request)
        return self._device(FLAP, node, resource, device_id, health)

    def _device(self, kind: str, node: str, resource: str, device_id: str, action: str) -> Taken:
        key = DeviceKey(node, resource, device_id)
        return Taken(kind, f"{kind} {key} -> {action}", key, action)

    def _pod(self, kind: str, node: str) -> Taken | None:
        pods = self._call(node, {"op": "pod.list"})["pods"]
        ours = sorted(p["name"] for p in pods if p["namespace"] == NAMESPACE)
        if kind == POD_DELETE or len(ours) >= MAX_PODS_PER_NODE:
            if not ours:
                return None
            name = self.random.choice(ours)
            self._call(node, {"op": "pod.delete", "namespace": NAMESPACE, "name": name})
            return Taken(POD_DELETE, f"pod-delete {node} {NAMESPACE}/{name}")
        plugins = self._call(node, {"op": "plugin.status"})["plugins"]
        if not plugins:
            return None
        resource = self.random.choice(sorted(plugins))
        count = self.random.choice((1, 1, 2))
        self._pod_number += 1
        name = f"p-{self._pod_number}"
        request = {
            "op": "pod.create",
            "namespace": NAMESPACE,
            "name": name,
            "containers": [{"name": "main", "requests": {resource: count}}],
        }
        self._call(node, request)
        return Taken(POD_CREATE, f"pod-create {node} {NAMESPACE}/{name} {resource}={count}")

    def _restart(self, kind: str, node: str) -> Taken | None:
        member, signum, affected = {
            KILL_AGENT: (f"agent {node}", signal.SIGKILL, node),
            RESTART_KUBELET: (f"node {node}", signal.SIGTERM, node),
            RESTART_SERVICE: ("service", signal.SIGTERM, None),
            RESTART_APISERVER: ("sim-apiserver", signal.SIGTERM, None),
        }[kind]
        if not self.restart(member, kind, signum):
            return None
        where = f" {node}" if affected else ""
        return Taken(kind, f"{kind}{where}", killed=member, node=affected)
