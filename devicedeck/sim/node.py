"""SimNode: a simulated kubelet and its simulated device plugins in one process.

    devicedeck sim-node --root /tmp/node-a --plugin nvidia.com/gpu:8:gpu \\
        --plugin example.com/dongle:4 --workload 42

Plugins register with the kubelet the classic way (kubelet.sock), exactly as a separate
`devicedeck sim-plugin` would; being in the same process only lets the kubelet's control
interface (sim-ctl `device health|unplug|plug`) reach them. Without --numa, GPU and MIG
plugins spread their devices over two NUMA nodes and dongles report no topology.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from devicedeck.kubelet.names import extended_resource_name_problem
from devicedeck.sim.kubeclient import KubeClient
from devicedeck.sim.kubelet import SimKubelet
from devicedeck.sim.kubelet.devices import DEFAULT_GRACE_SECONDS
from devicedeck.sim.kubelet.topology import DEFAULT_POLICY
from devicedeck.sim.plugin import (
    DEFAULT_NODE_NAME,
    PLUG,
    PROFILES,
    UNPLUG,
    HealthDriver,
    HealthEvent,
    SimDevicePlugin,
    parse_health_event,
)
from devicedeck.sim.workload import DEFAULT_INTERVAL_SECONDS, Workload

log = logging.getLogger(__name__)

DEFAULT_NUMA_BY_PROFILE = {"dongle": 0, "gpu": 2, "mig": 2}
REGISTRATION_WAIT_SECONDS = 10.0


@dataclass(frozen=True)
class PluginSpec:
    resource: str
    count: int
    profile: str = "dongle"

    @classmethod
    def parse(cls, text: str) -> PluginSpec:
        """RESOURCE:COUNT[:PROFILE], e.g. nvidia.com/gpu:8:gpu."""
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"plugin {text!r}: expected RESOURCE:COUNT[:PROFILE]")
        resource, count_text = parts[0], parts[1]
        profile = parts[2] if len(parts) == 3 else "dongle"
        problem = extended_resource_name_problem(resource)
        if problem:
            raise ValueError(f"plugin {text!r}: resource name {problem}")
        if not count_text.isdigit() or int(count_text) < 1:
            raise ValueError(f"plugin {text!r}: COUNT must be a whole number of at least 1")
        if profile not in PROFILES:
            raise ValueError(f"plugin {text!r}: PROFILE must be one of {', '.join(PROFILES)}")
        return cls(resource, int(count_text), profile)


def parse_node_health_event(text: str) -> tuple[str, HealthEvent]:
    """ "RESOURCE AT_SECONDS DEVICE ACTION": one health-script line for one plugin."""
    resource, _, line = text.strip().partition(" ")
    if not line:
        raise ValueError(f"expected 'RESOURCE AT_SECONDS DEVICE_ID ACTION', got {text!r}")
    return resource, parse_health_event(line)


class _PluginControls:
    """Lets the kubelet's control interface drive an in-process plugin; accepts a device
    id or `#N` (the N-th device of the plugin) everywhere."""

    def __init__(self, plugin: SimDevicePlugin) -> None:
        self._plugin = plugin

    def set_health(self, device_id: str, health: str) -> None:
        self._plugin.set_health(self._plugin.resolve(device_id), health)

    def unplug(self, device_id: str) -> None:
        self._plugin.unplug(device_id)

    def plug(self, device_id: str) -> None:
        self._plugin.plug(device_id)

    def devices(self) -> list[tuple[str, str]]:
        return [(d.id, d.health) for d in self._plugin.devices()]


class SimNode:
    def __init__(
        self,
        root: Path | str,
        plugins: Sequence[PluginSpec],
        *,
        workload_seed: int | None = None,
        workload_interval: float = DEFAULT_INTERVAL_SECONDS,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
        numa_nodes: int | None = None,
        seed: int = 0,
        node_name: str = DEFAULT_NODE_NAME,
        kube_client: KubeClient | None = None,
        topology_policy: str = DEFAULT_POLICY,
        health_events: Sequence[tuple[str, HealthEvent]] = (),
        flaky: Mapping[str, int] | None = None,
    ) -> None:
        resources = [p.resource for p in plugins]
        duplicates = sorted({r for r in resources if resources.count(r) > 1})
        if duplicates:
            raise ValueError(f"one plugin per resource; repeated: {', '.join(duplicates)}")
        unknown = sorted({r for r, _ in health_events if r not in resources})
        if unknown:
            raise ValueError(f"health events for resources without a plugin: {', '.join(unknown)}")
        self.root = Path(root)
        self.kubelet = SimKubelet(
            self.root,
            grace_seconds=grace_seconds,
            kube_client=kube_client,
            node_name=node_name,
            topology_policy=topology_policy,
        )
        self.plugins: dict[str, SimDevicePlugin] = {
            spec.resource: SimDevicePlugin(
                spec.resource,
                root=self.root,
                count=spec.count,
                profile=spec.profile,
                numa_nodes=(
                    numa_nodes if numa_nodes is not None else DEFAULT_NUMA_BY_PROFILE[spec.profile]
                ),
                seed=seed,
                node_name=node_name,
            )
            for spec in plugins
        }
        self.drivers = [
            HealthDriver(plugin, events=[e for r, e in health_events if r == resource])
            for resource, plugin in self.plugins.items()
        ]
        # The workload's flaps leave the scripted devices to the script, and a resource whose
        # device is plugged or unplugged still around that moment.
        scripted: dict[str, set[str]] = {}
        quiet_at: dict[str, list[float]] = {}
        for resource, event in health_events:
            scripted.setdefault(resource, set()).add(self.plugins[resource].resolve(event.device))
            if event.action in (PLUG, UNPLUG):
                quiet_at.setdefault(resource, []).append(event.at_seconds)
        self.workload: Workload | None = None
        if workload_seed is not None:
            self.workload = Workload(
                self.kubelet,
                self.plugins,
                seed=workload_seed,
                interval_seconds=workload_interval,
                scripted=scripted,
                flaky=flaky,
                quiet_at=quiet_at,
            )
        self._started: list[SimDevicePlugin] = []

    def start(self) -> None:
        self.kubelet.start()
        try:
            for resource, plugin in self.plugins.items():
                plugin.start()
                self._started.append(plugin)
                self.kubelet.attach_device_controller(resource, _PluginControls(plugin))
            for plugin in self._started:
                if not plugin.wait_for_registration(timeout=REGISTRATION_WAIT_SECONDS):
                    raise RuntimeError(f"plugin {plugin.resource_name} did not register")
            for driver in self.drivers:
                driver.start()
            if self.workload is not None:
                self.workload.start()
        except BaseException:
            self.stop()
            raise
        log.info(
            "sim-node started",
            extra={
                "root": self.root,
                "plugins": ",".join(self.plugins),
                "workload": self.workload is not None,
            },
        )

    def stop(self) -> None:
        if self.workload is not None:
            self.workload.stop()
        for driver in self.drivers:
            driver.stop()
        # Kubelet first: a node shutting down is not a plugin failure, so the checkpoint
        # must not record the plugins' streams ending.
        self.kubelet.stop()
        for plugin in reversed(self._started):
            plugin.stop()
        self._started.clear()
        log.info("sim-node stopped", extra={"root": self.root})

    def __enter__(self) -> SimNode:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
