"""A simulated device plugin: the real DevicePlugin protocol with made-up devices.

Profiles give device ids and Allocate answers shaped like real plugins':
dongle (`dongle-0`, ...), gpu (`GPU-<uuid>`, NVIDIA-style env and device nodes) and mig
(`MIG-<uuid>`). Ids derive from (node, resource, seed), so a node's devices keep their
ids across restarts. A HealthDriver replays a health script and/or random flaps.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicedeck.kubelet.deviceplugin import HEALTHY, UNHEALTHY, DevicePluginServer, PluginDevice
from devicedeck.kubelet.paths import device_plugins_dir
from devicedeck.kubelet.proto import deviceplugin_pb2

log = logging.getLogger(__name__)

PROFILES = ("dongle", "gpu", "mig")
DEFAULT_NODE_NAME = "sim-node"
PLUG = "plug"
UNPLUG = "unplug"
SCRIPT_ACTIONS = (HEALTHY, UNHEALTHY, PLUG, UNPLUG)
# A MIG-capable GPU splits into at most 7 instances; used to name the parent GPU node.
MIG_SLICES_PER_GPU = 7


def _stable_uuid(*parts: object) -> str:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def device_id_for(profile: str, index: int, *, resource: str, seed: int, node: str) -> str:
    if profile == "dongle":
        return f"dongle-{index}"
    if profile == "gpu":
        return "GPU-" + _stable_uuid(node, resource, seed, "gpu", index)
    if profile == "mig":
        return "MIG-" + _stable_uuid(node, resource, seed, "mig", index)
    raise ValueError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}")


def numa_node_for(index: int, count: int, numa_nodes: int) -> tuple[int, ...]:
    """Spread `count` devices evenly over `numa_nodes` nodes in contiguous blocks, like
    devices on a real board; 0 NUMA nodes means the plugin reports no topology."""
    if numa_nodes <= 0:
        return ()
    if index >= count:
        # Hot-plugged beyond the initial set: round-robin keeps the spread even.
        return (index % numa_nodes,)
    return (index * numa_nodes // count,)


class SimDevicePlugin(DevicePluginServer):
    def __init__(
        self,
        resource_name: str,
        *,
        root: Path | str,
        count: int,
        profile: str = "dongle",
        numa_nodes: int = 1,
        seed: int = 0,
        node_name: str = DEFAULT_NODE_NAME,
        **server_options: Any,
    ) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}")
        if count < 0:
            raise ValueError("count must not be negative")
        self.profile = profile
        self.seed = seed
        self.node_name = node_name
        self._count = count
        self._numa_nodes = numa_nodes
        # Every device this plugin ever had, so an unplugged one can come back as it was.
        self._catalogue: dict[str, tuple[int, PluginDevice]] = {}
        # The base class sets resource_name only after it has the device list.
        self._resource = resource_name
        devices = [self._catalogue_device(i) for i in range(count)]
        super().__init__(
            resource_name,
            device_plugins_dir=device_plugins_dir(root),
            devices=devices,
            **server_options,
        )

    def _catalogue_device(self, index: int, device_id: str | None = None) -> PluginDevice:
        device_id = device_id or device_id_for(
            self.profile, index, resource=self._resource, seed=self.seed, node=self.node_name
        )
        device = PluginDevice(
            device_id, HEALTHY, numa_node_for(index, self._count, self._numa_nodes)
        )
        self._catalogue[device_id] = (index, device)
        return device

    def resolve(self, token: str) -> str:
        """A device id from an id or `#N` (the N-th device of this plugin, from 0)."""
        if token.startswith("#") and token[1:].isdigit():
            index = int(token[1:])
            for device_id, (i, _) in self._catalogue.items():
                if i == index:
                    return device_id
            return device_id_for(
                self.profile, index, resource=self._resource, seed=self.seed, node=self.node_name
            )
        return token

    def unplug(self, device_id: str) -> None:
        """The device disappears from the list, as when hardware is pulled out."""
        self.remove_device(self.resolve(device_id))

    def plug(self, device: str) -> None:
        """Bring back an unplugged device, or add a new healthy one (an id or `#N`)."""
        # The base class lock (re-entrant) keeps catalogue and device list in step when
        # a script and the node API plug devices at the same time.
        with self._lock:
            device_id = self.resolve(device)
            known = self._catalogue.get(device_id)
            if known is not None:
                self.add_device(known[1])
                return
            if device.startswith("#"):
                index = int(device[1:])
            else:
                index = max((i for i, _ in self._catalogue.values()), default=-1) + 1
            self.add_device(self._catalogue_device(index, device_id))

    def index_of(self, device_id: str) -> int:
        return self._catalogue[device_id][0]

    def allocate_container(
        self, device_ids: list[str]
    ) -> deviceplugin_pb2.ContainerAllocateResponse:
        response = deviceplugin_pb2.ContainerAllocateResponse()
        indexes = [self.index_of(d) for d in device_ids]
        joined = ",".join(device_ids)

        def add_device_node(path: str) -> None:
            response.devices.add(container_path=path, host_path=path, permissions="rw")

        if self.profile == "dongle":
            response.envs["DONGLE_DEVICES"] = joined
            for i in indexes:
                add_device_node(f"/dev/dongle{i}")
            response.mounts.add(
                container_path="/opt/dongle/firmware",
                host_path="/var/lib/sim-dongle/firmware",
                read_only=True,
            )
            return response

        response.envs["NVIDIA_VISIBLE_DEVICES"] = joined
        for path in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
            add_device_node(path)
        if self.profile == "gpu":
            for i in indexes:
                add_device_node(f"/dev/nvidia{i}")
        else:
            for parent in sorted({i // MIG_SLICES_PER_GPU for i in indexes}):
                add_device_node(f"/dev/nvidia{parent}")
            for i in indexes:
                add_device_node(f"/dev/nvidia-caps/nvidia-cap{i + 1}")
        response.mounts.add(
            container_path="/usr/local/nvidia/lib64",
            host_path="/run/nvidia/driver/usr/lib64",
            read_only=True,
        )
        for device_id in device_ids:
            response.cdi_devices.add(name=f"{self.resource_name}={device_id}")
        return response


@dataclass(frozen=True)
class HealthEvent:
    at_seconds: float
    device: str  # a device id or `#N`
    action: str  # Healthy | Unhealthy | plug | unplug


def parse_health_script(text: str) -> list[HealthEvent]:
    """Lines "AT_SECONDS DEVICE Healthy|Unhealthy|unplug|plug", DEVICE an id or `#N`.
    Blank lines and lines starting with '#' are skipped. Events come back sorted by time."""
    events: list[HealthEvent] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 3:
            raise ValueError(f"line {number}: expected 'AT_SECONDS DEVICE_ID ACTION': {raw!r}")
        at_text, device, action = parts
        try:
            at = float(at_text)
        except ValueError as e:
            raise ValueError(f"line {number}: {at_text!r} is not a number of seconds") from e
        if at < 0:
            raise ValueError(f"line {number}: time must not be negative")
        if action not in SCRIPT_ACTIONS:
            raise ValueError(
                f"line {number}: action {action!r} must be one of {', '.join(SCRIPT_ACTIONS)}"
            )
        events.append(HealthEvent(at, device, action))
    return sorted(events, key=lambda e: e.at_seconds)


def parse_health_event(text: str) -> HealthEvent:
    """One script line, "AT_SECONDS DEVICE Healthy|Unhealthy|unplug|plug", as an option gives it."""
    events = parse_health_script(text)
    if len(events) != 1 or "\n" in text:
        raise ValueError(f"expected one 'AT_SECONDS DEVICE_ID ACTION', got {text!r}")
    return events[0]


class HealthDriver:
    """Changes a plugin's devices over time from a script and/or seeded random flaps.

    Owns one thread; stop() wakes it at once. With a flap interval, every interval
    (jittered +/-50%, from the seeded generator, so a seed replays the same sequence)
    one random present device toggles between Healthy and Unhealthy; devices the script
    names are left to the script, so what it sets stays set.
    """

    def __init__(
        self,
        plugin: SimDevicePlugin,
        *,
        events: Iterable[HealthEvent] = (),
        flap_interval: float | None = None,
        seed: int = 0,
    ) -> None:
        if flap_interval is not None and flap_interval <= 0:
            raise ValueError("flap interval must be positive")
        self._plugin = plugin
        self._events = sorted(events, key=lambda e: e.at_seconds)
        self._flap_interval = flap_interval
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self._events and self._flap_interval is None:
            return
        self._thread = threading.Thread(target=self._run, name="sim-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def apply(self, event: HealthEvent) -> None:
        plugin = self._plugin
        try:
            if event.action == PLUG:
                plugin.plug(event.device)
            elif event.action == UNPLUG:
                plugin.unplug(event.device)
            else:
                plugin.set_health(plugin.resolve(event.device), event.action)
        except (KeyError, ValueError) as e:
            # A script naming a device that is absent right now is not fatal.
            log.warning(
                "health script skipped",
                extra={
                    "event": "health_script_skipped",
                    "device": event.device,
                    "action": event.action,
                    "reason": e,
                },
            )

    def _next_flap_delay(self) -> float:
        assert self._flap_interval is not None
        return self._flap_interval * self._random.uniform(0.5, 1.5)

    def _flap(self) -> None:
        scripted = {self._plugin.resolve(e.device) for e in self._events}
        devices = [d for d in self._plugin.devices() if d.id not in scripted]
        if not devices:
            return
        device = self._random.choice(devices)
        health = UNHEALTHY if device.health == HEALTHY else HEALTHY
        try:
            self._plugin.set_health(device.id, health)
        except KeyError:
            # Unplugged by another caller since devices() was read; skip this flap.
            log.debug("flap skipped", extra={"event": "flap_skipped", "device": device.id})

    def _run(self) -> None:
        started = time.monotonic()
        pending = list(self._events)
        next_flap = self._next_flap_delay() if self._flap_interval is not None else None
        while pending or next_flap is not None:
            due = [
                t for t in (pending[0].at_seconds if pending else None, next_flap) if t is not None
            ]
            target = min(due)
            # Event.wait is the stop signal too: returning True means stop() was called.
            if self._stop.wait(max(0.0, target - (time.monotonic() - started))):
                return
            elapsed = target
            while pending and pending[0].at_seconds <= elapsed:
                self.apply(pending.pop(0))
            if next_flap is not None and next_flap <= elapsed:
                self._flap()
                next_flap = elapsed + self._next_flap_delay()
