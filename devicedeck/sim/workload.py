"""A seeded workload for a simulated node: pods come and go, devices flap.

Each step makes one decision from a random.Random(seed): create a pod (one or two
containers, sometimes a sidecar without devices) or delete one, and now and then turn a
healthy device Unhealthy for a few steps. The same seed gives the same sequence of
decisions; whether a pod is admitted still depends on what the devices look like then.
The workload owns the pods in its namespaces, including ones restored after a restart.

A resource may have a few flaky devices (`flaky`: how many per resource), chosen from the
seed among the devices no health script drives: most of that resource's flaps land on them,
so a ranking of devices by flaps shows a few clear leaders. A flaky device that is among
the free devices kept for pods by hand is spared meanwhile, as any free device is. Without
flaky devices the decisions are those of earlier versions for the same seed.

Around a scripted plug or unplug of a resource (`quiet_at`), the workload neither flaps nor
recovers that resource's devices for `QUIET_SECONDS` either side: a node's counts cannot tell
which device went when other devices change in the same moment, and the demo's story (one
dongle fails, later another is pulled out) is told to be read.

It leaves a quarter of each resource's devices free and healthy (`reserved`): a pod that would
take them is not created, and a free device is not flapped while only the reserve is free. So
a person trying the demo can always create a pod by hand (two of gpu-a's eight GPUs).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from devicedeck.kubelet.deviceplugin import HEALTHY, UNHEALTHY
from devicedeck.sim.kubelet import AdmissionError, ContainerSpec, SimKubelet
from devicedeck.sim.plugin import SimDevicePlugin

log = logging.getLogger(__name__)

WORKLOAD_NAMESPACES = ("ml-training", "inference", "video-encode")
POD_PREFIXES = ("train", "serve", "encode", "batch")
DEFAULT_INTERVAL_SECONDS = 2.0
DEFAULT_MAX_PODS = 8
FLAP_PROBABILITY = 0.2
KUBELET_VIEW_TIMEOUT_SECONDS = 10.0
RESERVED_SHARE = 0.25
# The share of a resource's flaps that go to its flaky devices, while one of them is healthy.
FLAKY_SHARE = 0.9
# Seconds either side of a scripted plug or unplug in which a resource's devices keep still:
# long enough for the agent's next read and the Node's next status to see the change alone.
QUIET_SECONDS = 10.0


def reserved(total: int) -> int:
    """How many of a resource's `total` devices the workload leaves free for pods by hand."""
    return int(total * RESERVED_SHARE)


def leaves_reserve(
    requests: Mapping[str, int], free: Mapping[str, int], total: Mapping[str, int]
) -> bool:
    """Whether a pod asking for `requests` leaves every resource its reserve of free devices."""
    return all(free.get(r, 0) - n >= reserved(total.get(r, 0)) for r, n in requests.items())


def pod_requests(containers: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Devices per resource a pod asks for, over all its containers."""
    total: dict[str, int] = {}
    for requests in containers:
        for resource, count in requests.items():
            total[resource] = total.get(resource, 0) + count
    return total


@dataclass
class _Recovery:
    due_step: int
    resource: str
    device_id: str


class Workload:
    def __init__(
        self,
        kubelet: SimKubelet,
        plugins: Mapping[str, SimDevicePlugin],
        *,
        seed: int,
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
        max_pods: int = DEFAULT_MAX_PODS,
        scripted: Mapping[str, set[str]] | None = None,
        flaky: Mapping[str, int] | None = None,
        quiet_at: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        if interval_seconds <= 0:
            raise ValueError("workload interval must be positive")
        self._kubelet = kubelet
        self._plugins = dict(sorted(plugins.items()))
        self._random = random.Random(seed)
        self._interval = interval_seconds
        # Devices a health script drives: never flapped, so what the script sets stays.
        self._scripted = {r: set(ids) for r, ids in (scripted or {}).items()}
        self.flaky = self._choose_flaky(seed, flaky or {})
        self._max_pods = max_pods
        # Seconds after start of each resource's scripted plugs and unplugs.
        self._quiet_at = {r: tuple(times) for r, times in (quiet_at or {}).items()}
        self._started_at: float | None = None
        self._step = 0
        self._recoveries: list[_Recovery] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.created = 0
        self.deleted = 0
        self.rejected = 0
        self.held_back = 0

    def _choose_flaky(self, seed: int, counts: Mapping[str, int]) -> dict[str, set[str]]:
        """The flaky devices of each resource, from their own generator: choosing them leaves
        the sequence of the workload's decisions as it is."""
        unknown = sorted(set(counts) - set(self._plugins))
        if unknown:
            raise ValueError(f"flaky devices for resources without a plugin: {', '.join(unknown)}")
        chosen: dict[str, set[str]] = {}
        for resource, count in sorted(counts.items()):
            scripted = self._scripted.get(resource, set())
            candidates = sorted(
                d.id for d in self._plugins[resource].devices() if d.id not in scripted
            )
            if not 0 <= count <= len(candidates):
                raise ValueError(
                    f"{resource}: {count} flaky devices asked for, {len(candidates)} to choose from"
                )
            picker = random.Random(f"{seed}/flaky/{resource}")
            chosen[resource] = set(picker.sample(candidates, count))
        return chosen

    def start(self) -> None:
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="sim-workload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.step()
            except Exception:
                # One odd step (a plugin going away mid-call) must not end the demo.
                log.exception("workload step failed", extra={"step": self._step})

    def _owned_pods(self) -> list[tuple[str, str]]:
        return [
            (p.namespace, p.name)
            for p in self._kubelet.pods.active()
            if p.namespace in WORKLOAD_NAMESPACES
        ]

    def step(self) -> None:
        self._step += 1
        rng = self._random
        self._recover_due()
        if self._plugins and rng.random() < FLAP_PROBABILITY:
            self._flap()
        owned = self._owned_pods()
        if not owned or (len(owned) < self._max_pods and rng.random() < 0.6):
            self._create_pod()
        else:
            namespace, name = rng.choice(owned)
            try:
                self._kubelet.delete_pod(namespace, name)
                self.deleted += 1
            except AdmissionError as e:
                log.info(
                    "workload delete skipped",
                    extra={"namespace": namespace, "pod": name, "reason": e},
                )

    def _create_pod(self) -> None:
        rng = self._random
        namespace = rng.choice(WORKLOAD_NAMESPACES)
        name = f"{rng.choice(POD_PREFIXES)}-{rng.getrandbits(20):05x}"
        containers: list[ContainerSpec] = []
        for index in range(rng.randint(1, 2)):
            requests: dict[str, int] = {}
            if self._plugins:
                resource = rng.choice(list(self._plugins))
                requests[resource] = rng.randint(1, 2)
            containers.append(ContainerSpec(f"worker-{index}", requests))
        if rng.random() < 0.3:
            containers.append(ContainerSpec("log-shipper", {}))
        requests = pod_requests(c.requests for c in containers)
        manager = self._kubelet.manager
        free = {r: len(manager.free_healthy_devices(r)) for r in requests}
        if not leaves_reserve(requests, free, manager.capacity()):
            self.held_back += 1
            log.info(
                "workload pod held back",
                extra={"namespace": namespace, "pod": name, "reason": "reserve"},
            )
            return
        try:
            self._kubelet.create_pod(namespace, name, containers)
            self.created += 1
        except AdmissionError as e:
            self.rejected += 1
            log.info(
                "workload pod rejected",
                extra={"namespace": namespace, "pod": name, "reason": e},
            )

    def quiet(self, resource: str) -> bool:
        """Whether a scripted plug or unplug of the resource is near."""
        if self._started_at is None:
            return False
        now = time.monotonic() - self._started_at
        return any(abs(now - at) < QUIET_SECONDS for at in self._quiet_at.get(resource, ()))

    def _flap(self) -> None:
        rng = self._random
        resource = rng.choice(list(self._plugins))
        if self.quiet(resource):
            return
        plugin = self._plugins[resource]
        scripted = self._scripted.get(resource, set())
        healthy = sorted(
            d.id for d in plugin.devices() if d.health == HEALTHY and d.id not in scripted
        )
        free = {d.id for d in self._kubelet.manager.free_healthy_devices(resource)}
        if len(free) <= reserved(len(plugin.devices())):
            healthy = [i for i in healthy if i not in free]
        if not healthy:
            return
        flaky = [i for i in healthy if i in self.flaky.get(resource, ())]
        if flaky and rng.random() < FLAKY_SHARE:
            device_id = rng.choice(flaky)
        else:
            device_id = rng.choice(healthy)
        due = self._step + rng.randint(2, 5)
        log.info(
            "workload device flap",
            extra={"resource": resource, "device": device_id, "until_step": due},
        )
        plugin.set_health(device_id, UNHEALTHY)
        self._await_kubelet_view(resource, device_id, UNHEALTHY)
        self._recoveries.append(_Recovery(due, resource, device_id))

    def _await_kubelet_view(self, resource: str, device_id: str, health: str) -> None:
        # Admission in the next decision must see the flap, or the same seed could admit
        # different pods depending on how fast the plugin's stream delivered it.
        manager = self._kubelet.manager

        def seen() -> bool:
            return any(d.id == device_id and d.health == health for d in manager.devices(resource))

        if not manager.wait_for(seen, timeout=KUBELET_VIEW_TIMEOUT_SECONDS):
            log.warning(
                "workload flap not seen by kubelet",
                extra={"resource": resource, "device": device_id},
            )

    def _recover_due(self) -> None:
        # A recovery due while its resource keeps still waits for the quiet to end.
        due = [
            r for r in self._recoveries if r.due_step <= self._step and not self.quiet(r.resource)
        ]
        self._recoveries = [r for r in self._recoveries if r not in due]
        for recovery in due:
            try:
                self._plugins[recovery.resource].set_health(recovery.device_id, HEALTHY)
            except KeyError:
                # The device was unplugged meanwhile; nothing to recover.
                continue
            self._await_kubelet_view(recovery.resource, recovery.device_id, HEALTHY)
