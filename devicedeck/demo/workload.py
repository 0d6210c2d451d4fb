"""A workload that drives a sim-kubelet from outside, through its control socket.

In docker compose the kubelet and its plugins are separate containers, so the in-process
workload of sim-node cannot run there; this one creates and deletes pods over the kubelet's
control socket instead (device flaps come from the plugins' own --flap-interval). It uses
the same namespaces and pod names as sim-node's workload, and leaves the same reserve of free
devices for pods created by hand, so both demos look alike.
"""

from __future__ import annotations

import logging
import random
import threading
from pathlib import Path
from typing import Any

from devicedeck.kubelet.deviceplugin import HEALTHY
from devicedeck.sim.kubelet.control import (
    ControlError,
    ControlUnavailable,
    call,
    control_socket_path,
)
from devicedeck.sim.workload import (
    DEFAULT_MAX_PODS,
    POD_PREFIXES,
    WORKLOAD_NAMESPACES,
    leaves_reserve,
    pod_requests,
)

log = logging.getLogger(__name__)

CREATE_PROBABILITY = 0.6
SIDECAR_PROBABILITY = 0.3
CALL_TIMEOUT_SECONDS = 15.0


class RemoteWorkload:
    def __init__(
        self,
        root: Path,
        *,
        seed: int,
        interval_seconds: float,
        max_pods: int = DEFAULT_MAX_PODS,
    ) -> None:
        if interval_seconds <= 0:
            raise ValueError("workload interval must be positive")
        self._socket = control_socket_path(root)
        self._random = random.Random(seed)
        self._interval = interval_seconds
        self._max_pods = max_pods
        self._kubelet_seen = True
        self.created = 0
        self.deleted = 0
        self.rejected = 0
        self.held_back = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self._interval):
            try:
                self.step()
            except ControlUnavailable as e:
                # The kubelet may be starting or restarting; say so once, then keep trying.
                if self._kubelet_seen:
                    log.warning(
                        "kubelet unreachable; will retry",
                        extra={"event": "kubelet_unreachable", "reason": e},
                    )
                self._kubelet_seen = False

    def _call(self, request: dict[str, Any]) -> Any:
        result = call(self._socket, request, timeout=CALL_TIMEOUT_SECONDS)
        if not self._kubelet_seen:
            log.info("kubelet reachable again", extra={"event": "kubelet_reachable"})
            self._kubelet_seen = True
        return result

    def _owned_pods(self) -> list[tuple[str, str]]:
        pods = self._call({"op": "pod.list"})["pods"]
        return sorted(
            (p["namespace"], p["name"]) for p in pods if p["namespace"] in WORKLOAD_NAMESPACES
        )

    def _resources(self) -> list[str]:
        status = self._call({"op": "node.status"})["resources"]
        return sorted(r for r, s in status.items() if s.get("capacity", 0) > 0)

    def step(self) -> None:
        rng = self._random
        owned = self._owned_pods()
        if not owned or (len(owned) < self._max_pods and rng.random() < CREATE_PROBABILITY):
            self._create_pod(self._resources())
            return
        namespace, name = rng.choice(owned)
        try:
            self._call({"op": "pod.delete", "namespace": namespace, "name": name})
            self.deleted += 1
        except ControlUnavailable:
            raise
        except ControlError as e:
            log.info(
                "workload delete skipped",
                extra={
                    "event": "workload_delete_skipped",
                    "namespace": namespace,
                    "pod": name,
                    "reason": e,
                },
            )

    def _create_pod(self, resources: list[str]) -> None:
        rng = self._random
        namespace = rng.choice(WORKLOAD_NAMESPACES)
        name = f"{rng.choice(POD_PREFIXES)}-{rng.getrandbits(20):05x}"
        containers: list[dict[str, Any]] = []
        for index in range(rng.randint(1, 2)):
            requests = {rng.choice(resources): rng.randint(1, 2)} if resources else {}
            containers.append({"name": f"worker-{index}", "requests": requests})
        if rng.random() < SIDECAR_PROBABILITY:
            containers.append({"name": "log-shipper", "requests": {}})
        requests = pod_requests(c["requests"] for c in containers)
        if requests and not self._leaves_reserve(requests):
            self.held_back += 1
            log.info(
                "workload pod held back",
                extra={
                    "event": "workload_pod_held_back",
                    "namespace": namespace,
                    "pod": name,
                    "reason": "reserve",
                },
            )
            return
        request = {"op": "pod.create", "namespace": namespace, "name": name}
        try:
            self._call({**request, "containers": containers})
            self.created += 1
        except ControlUnavailable:
            raise
        except ControlError as e:
            self.rejected += 1
            log.info(
                "workload pod rejected",
                extra={
                    "event": "workload_pod_rejected",
                    "namespace": namespace,
                    "pod": name,
                    "reason": e,
                },
            )

    def _leaves_reserve(self, requests: dict[str, int]) -> bool:
        status = self._call({"op": "node.status"})["resources"]
        held = {
            (resource, device_id)
            for pod in self._call({"op": "pod.list"})["pods"]
            for container in pod["containers"]
            for resource, assigned in container["devices"].items()
            for device_id in assigned["device_ids"]
        }
        free = {
            resource: sum(
                1
                for d in s["devices"]
                if d["health"] == HEALTHY and (resource, d["id"]) not in held
            )
            for resource, s in status.items()
        }
        total = {resource: len(s["devices"]) for resource, s in status.items()}
        return leaves_reserve(requests, free, total)
