"""A simulated DRA driver and its users, written to an API server through its HTTP API.

For one node it publishes what a GPU DRA driver would (a ResourceSlice with the node's pool of
GPUs) and what a cluster using it would hold: a pod whose claim comes from a template (the
claim name recorded in the pod's status, as the ResourceClaim controller does), a second claim
whose device the driver reports not ready, and a monitoring DaemonSet's admin-access claim on
every GPU. Objects are created if missing and otherwise brought back to this shape, every
`interval` seconds, so a restarted API server gets them again.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from devicedeck.sim.kubeclient import KubeClient, KubeClientError

log = logging.getLogger(__name__)

DRIVER = "gpu.sim.devicedeck.dev"
DRA_PATH = "/apis/resource.k8s.io/v1"
WORKLOAD_NAMESPACE = "ml"
MONITOR_NAMESPACE = "monitoring"
DEFAULT_INTERVAL_SECONDS = 30.0
TEMPLATE = "one-gpu"
# gpu-1 is the broken one, in the claim's conditions and in the health stream alike.
BROKEN_GPU = "gpu-1"
BROKEN_GPU_MESSAGE = "Xid 79: GPU has fallen off the bus"


@dataclass(frozen=True)
class DraDriverSpec:
    node: str
    devices: int = 4
    driver: str = DRIVER

    @property
    def slice_name(self) -> str:
        return f"{self.node}-{self.driver}"

    @property
    def device_names(self) -> list[str]:
        return [f"gpu-{i}" for i in range(self.devices)]


def resource_slice(spec: DraDriverSpec) -> dict[str, Any]:
    return {
        "metadata": {"name": spec.slice_name},
        "spec": {
            "driver": spec.driver,
            "nodeName": spec.node,
            "pool": {"name": spec.node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": name,
                    "attributes": {
                        "model": {"string": "SIM-GPU-80G"},
                        "index": {"int": i},
                        "uuid": {"string": f"GPU-sim-{spec.node}-{i}"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i, name in enumerate(spec.device_names)
            ],
        },
    }


def _pod(spec: DraDriverSpec, namespace: str, name: str, ref: str, claim: dict[str, str]) -> Any:
    return {
        "metadata": {"namespace": namespace, "name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": spec.node,
            "resourceClaims": [{"name": ref, **claim}],
            "containers": [
                {"name": "main", "image": "sim/gpu-job:1", "resources": {"claims": [{"name": ref}]}}
            ],
        },
    }


def _result(spec: DraDriverSpec, device: str, **extra: Any) -> dict[str, Any]:
    return {"request": "gpu", "driver": spec.driver, "pool": spec.node, "device": device, **extra}


def _ready(spec: DraDriverSpec, device: str, ready: bool, reason: str, message: str) -> Any:
    return {
        "driver": spec.driver,
        "pool": spec.node,
        "device": device,
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": "2026-12-01T10:00:00Z",
            }
        ],
    }


class SimDraDriver:
    def __init__(
        self,
        client: KubeClient,
        spec: DraDriverSpec,
        interval: float = DEFAULT_INTERVAL_SECONDS,
    ) -> None:
        self.client = client
        self.spec = spec
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- writing objects -------------------------------------------------------------------

    def _put(self, collection: str, obj: dict[str, Any], status: Any = None) -> dict[str, Any]:
        """Create the object, or replace what it has; then its status, when given."""
        metadata = obj["metadata"]
        namespace = metadata.get("namespace")
        base = DRA_PATH if collection.startswith("resource") else "/api/v1"
        where = f"{base}/namespaces/{quote(namespace)}" if namespace else base
        item = f"{where}/{collection}/{quote(metadata['name'])}"
        try:
            stored: dict[str, Any] = self.client.request("POST", f"{where}/{collection}", obj)
        except KubeClientError as e:
            if e.code != 409:
                raise
            stored = self.client.request("PUT", item, obj)
        if status is not None:
            body = {"metadata": {"name": metadata["name"]}, "status": status}
            if namespace:
                body["metadata"]["namespace"] = namespace
            stored = self.client.request("PUT", f"{item}/status", body)
        return stored

    def publish(self) -> None:
        """Write every object once; KubeClientError when the API server refuses or is away."""
        spec = self.spec
        self._put("resourceslices", resource_slice(spec))
        # A training pod holding gpu-0 through a claim made from a template.
        trainer = f"trainer-{spec.node}"
        generated = f"{trainer}-gpu-sim01"
        pod = self._put(
            "pods",
            _pod(
                spec, WORKLOAD_NAMESPACE, trainer, "gpu", {"resourceClaimTemplateName": "one-gpu"}
            ),
            status={
                "phase": "Running",
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": generated}],
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": True,
                        "allocatedResourcesStatus": [
                            {
                                "name": "claim:gpu",
                                "resources": [
                                    {
                                        "resourceID": f"{spec.driver}/{spec.node}/gpu-0",
                                        "health": "Healthy",
                                    }
                                ],
                            }
                        ],
                    }
                ],
            },
        )
        self._claim(
            WORKLOAD_NAMESPACE,
            generated,
            [_result(spec, "gpu-0")],
            [(trainer, pod["metadata"]["uid"])],
            [_ready(spec, "gpu-0", True, "Prepared", "device prepared for the container")],
        )
        # An inference pod whose GPU the driver reports broken.
        inference = f"inference-{spec.node}"
        claim = f"{inference}-gpu"
        pod = self._put(
            "pods",
            _pod(spec, WORKLOAD_NAMESPACE, inference, "gpu", {"resourceClaimName": claim}),
            status={"phase": "Running"},
        )
        self._claim(
            WORKLOAD_NAMESPACE,
            claim,
            [_result(spec, "gpu-1")],
            [(inference, pod["metadata"]["uid"])],
            [_ready(spec, "gpu-1", False, "XidError", BROKEN_GPU_MESSAGE)],
        )
        # A monitoring agent with admin access to every GPU: it watches, it does not allocate.
        monitor = f"gpu-monitor-{spec.node}"
        pod = self._put(
            "pods",
            _pod(spec, MONITOR_NAMESPACE, monitor, "gpus", {"resourceClaimName": monitor}),
            status={"phase": "Running"},
        )
        self._claim(
            MONITOR_NAMESPACE,
            monitor,
            [_result(spec, f"gpu-{i}", adminAccess=True) for i in range(spec.devices)],
            [(monitor, pod["metadata"]["uid"])],
            [],
        )

    def _claim(
        self,
        namespace: str,
        name: str,
        results: list[dict[str, Any]],
        consumers: list[tuple[str, str]],
        devices: list[dict[str, Any]],
    ) -> None:
        status: dict[str, Any] = {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": n, "uid": uid} for n, uid in consumers],
        }
        if devices:
            status["devices"] = devices
        body = {
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {}}]}},
        }
        self._put("resourceclaims", body, status=status)

    # --- running -----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.publish()
                wait = self.interval
            except KubeClientError as e:
                # The API server is not up yet, or restarting: try again soon.
                log.info("DRA objects not written yet", extra={"error": e})
                wait = min(self.interval, 2.0)
            self._stop.wait(wait)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="sim-dra-driver", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
