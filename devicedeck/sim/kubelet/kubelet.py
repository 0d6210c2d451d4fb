"""SimKubelet: the kubelet's device manager, plugin watcher and PodResources server.

Under a root directory it serves what a real kubelet serves under /var/lib/kubelet:

- ``device-plugins/kubelet.sock``: Registration (v1beta1); stale sockets in device-plugins/
  are removed at start, the checkpoint and other files are kept;
- ``device-plugins/kubelet_internal_checkpoint``: the device manager checkpoint (V2 JSON);
- ``plugins_registry/``: watched for plugin-watcher registrations;
- ``pod-resources/kubelet.sock``: PodResourcesLister (v1), rate limited.

With a kubeconfig it registers its Node with the API server, keeps the Node's status and
writes a Pod object for each pod it runs (cluster.py). It also keeps
``devicedeck-sim/pods.json`` (pod names and specs, which a real kubelet gets from the API
server) and serves the control interface (control.py) on ``devicedeck-sim/control.sock``.

In process::

    with SimKubelet(root, grace_seconds=300) as kubelet:
        kubelet.create_pod("default", "trainer", [ContainerSpec("main", {"nvidia.com/gpu": 2})])
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from devicedeck.kubelet.checkpoint import CheckpointError, read_checkpoint, write_checkpoint
from devicedeck.kubelet.paths import KubeletPaths, check_socket_path, unix_target
from devicedeck.kubelet.proto import deviceplugin_pb2_grpc as dp_grpc
from devicedeck.kubelet.proto import podresources_pb2_grpc as pr_grpc
from devicedeck.sim.kubeclient import KubeClient
from devicedeck.sim.kubelet.admission import AdmissionError, PodAdmitter, describe_pod
from devicedeck.sim.kubelet.cluster import STATUS_UPDATE_SECONDS, ClusterMember
from devicedeck.sim.kubelet.control import (
    ControlError,
    ControlServer,
    DeviceController,
    control_socket_path,
)
from devicedeck.sim.kubelet.devices import DEFAULT_GRACE_SECONDS, CheckpointState, DeviceManager
from devicedeck.sim.kubelet.endpoint import DIAL_TIMEOUT_SECONDS
from devicedeck.sim.kubelet.podresources_server import (
    DEFAULT_BURST,
    DEFAULT_QPS,
    PodResourcesService,
    RateLimitInterceptor,
    TokenBucket,
)
from devicedeck.sim.kubelet.pods import (
    ContainerSpec,
    Pod,
    PodSpecError,
    PodStore,
    container_spec_from_json,
)
from devicedeck.sim.kubelet.registration import (
    PluginRegistrar,
    RegistrationService,
    remove_stale_sockets,
)
from devicedeck.sim.kubelet.topology import DEFAULT_POLICY
from devicedeck.sim.kubelet.watcher import DEFAULT_RECONCILE_SECONDS, PluginWatcher

log = logging.getLogger(__name__)

POD_STATE_FILE_NAME = "pods.json"
# The kubelet creates this empty marker in device-plugins/ when it starts.
DEPRECATION_FILE_NAME = "DEPRECATION"
HEALTH_VALUES = ("Healthy", "Unhealthy")


class SimKubelet:
    def __init__(
        self,
        root: Path | str,
        *,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
        reconcile_seconds: float = DEFAULT_RECONCILE_SECONDS,
        housekeeping_seconds: float = 1.0,
        rate_limit_qps: float = DEFAULT_QPS,
        rate_limit_burst: int = DEFAULT_BURST,
        dial_timeout: float = DIAL_TIMEOUT_SECONDS,
        topology_policy: str = DEFAULT_POLICY,
        kube_client: KubeClient | None = None,
        node_name: str | None = None,
        status_update_seconds: float = STATUS_UPDATE_SECONDS,
    ) -> None:
        self.paths = KubeletPaths(Path(root).absolute())
        self.control_socket = control_socket_path(self.paths.root)
        for socket_path in (
            self.paths.kubelet_socket,
            self.paths.pod_resources_socket,
            self.control_socket,
        ):
            check_socket_path(socket_path)
        self.manager = DeviceManager(self._write_checkpoint, grace_seconds=grace_seconds)
        self.pods = PodStore(self.control_socket.parent / POD_STATE_FILE_NAME)
        self.admitter = PodAdmitter(self.pods, self.manager, topology_policy=topology_policy)
        self.cluster: ClusterMember | None = None
        if kube_client is not None:
            if not node_name:
                raise ValueError("a node name is needed to join the cluster")
            self.cluster = ClusterMember(
                kube_client,
                node_name,
                self.manager,
                self.pods.active,
                update_seconds=status_update_seconds,
            )
        self._registrar = PluginRegistrar(self.manager, dial_timeout=dial_timeout)
        self.watcher = PluginWatcher(
            self.paths.plugins_registry_dir,
            self.paths.device_plugins_dir,
            self._registrar,
            reconcile_seconds=reconcile_seconds,
        )
        self._rate_limit = (rate_limit_qps, rate_limit_burst)
        self._housekeeping_seconds = housekeeping_seconds
        self._controllers: dict[str, DeviceController] = {}
        self._servers: list[tuple[grpc.Server, ThreadPoolExecutor]] = []
        self._control = ControlServer(self.control_socket, self.handle_control)
        self._stop = threading.Event()
        self._housekeeping: threading.Thread | None = None
        self._started = False
        self._used = False

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start serving. An instance runs once; a restart is a new SimKubelet on the root."""
        if self._used:
            raise RuntimeError("a SimKubelet starts only once; create a new one to restart")
        self._used = True
        self.paths.make_dirs()
        remove_stale_sockets(self.paths.device_plugins_dir)
        (self.paths.device_plugins_dir / DEPRECATION_FILE_NAME).touch()
        self._restore()
        self._started = True
        try:
            self._serve(
                self.paths.kubelet_socket,
                lambda server: dp_grpc.add_RegistrationServicer_to_server(
                    RegistrationService(self._registrar, self.paths.device_plugins_dir), server
                ),
            )
            bucket = TokenBucket(*self._rate_limit)
            self._serve(
                self.paths.pod_resources_socket,
                lambda server: pr_grpc.add_PodResourcesListerServicer_to_server(
                    PodResourcesService(self.manager, self.pods.active, self.admitter.active_uids),
                    server,
                ),
                interceptors=[RateLimitInterceptor(bucket)],
            )
            self.watcher.start()
            self._control.start()
            self._housekeeping = threading.Thread(
                target=self._housekeep, name="sim-kubelet housekeeping", daemon=True
            )
            self._housekeeping.start()
            if self.cluster is not None:
                self.cluster.start()
        except BaseException:
            self.stop()
            raise
        log.info("sim-kubelet started", extra={"root": self.paths.root})

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self.cluster is not None:
            self.cluster.stop()
        # From here on, streams ending are our doing, not plugin failures.
        self.manager.close()
        self._stop.set()
        self._control.stop()
        self.watcher.stop()
        for server, _ in self._servers:
            server.stop(grace=0.5).wait()
        for endpoint in self.manager.endpoints():
            endpoint.stop()
        for _, executor in self._servers:
            executor.shutdown(wait=True)
        self._servers.clear()
        if self._housekeeping is not None:
            self._housekeeping.join()
            self._housekeeping = None
        log.info("sim-kubelet stopped", extra={"root": self.paths.root})

    def __enter__(self) -> SimKubelet:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _serve(
        self,
        socket_path: Path,
        add: Callable[[grpc.Server], None],
        interceptors: Sequence[Any] = (),
    ) -> None:
        socket_path.unlink(missing_ok=True)
        executor = ThreadPoolExecutor(
            max_workers=8, thread_name_prefix=f"grpc-{socket_path.parent.name}"
        )
        server = grpc.server(executor, interceptors=list(interceptors))
        add(server)
        try:
            server.add_insecure_port(unix_target(socket_path))
        except RuntimeError as e:
            executor.shutdown(wait=False)
            raise RuntimeError(f"cannot listen on {socket_path}") from e
        server.start()
        self._servers.append((server, executor))
        log.info("serving", extra={"socket": socket_path})

    def _restore(self) -> None:
        pods = self.pods.load()
        if self.paths.checkpoint.exists():
            try:
                checkpoint = read_checkpoint(self.paths.checkpoint)
            except CheckpointError as e:
                # The kubelet carries on without the old allocation state in this case.
                log.warning(
                    "checkpoint not restored", extra={"path": self.paths.checkpoint, "error": e}
                )
            else:
                self.manager.restore(checkpoint)
                log.info(
                    "checkpoint restored",
                    extra={
                        "entries": len(checkpoint.entries),
                        "resources": len(checkpoint.registered_devices),
                        "pods": len(pods),
                    },
                )

    def _write_checkpoint(self, state: CheckpointState) -> None:
        write_checkpoint(self.paths.checkpoint, state.entries, state.registered)

    def _housekeep(self) -> None:
        # Stands in for the node status loop, which is where the kubelet notices that a
        # stopped endpoint outlived its grace period.
        while not self._stop.wait(self._housekeeping_seconds):
            self.manager.expire_stopped()

    # --- pods and devices -----------------------------------------------------------------

    def create_pod(self, namespace: str, name: str, containers: Sequence[ContainerSpec]) -> Pod:
        if self.cluster is None:
            return self.admitter.create_pod(namespace, name, containers)
        return self.cluster.admit(namespace, name, containers, self.admitter.create_pod)

    def delete_pod(self, namespace: str, name: str) -> Pod:
        pod = self.admitter.delete_pod(namespace, name)
        if self.cluster is not None:
            self.cluster.pod_gone(pod)
        return pod

    def attach_device_controller(self, resource: str, controller: DeviceController) -> None:
        """Let the control interface change devices of a plugin living in this process."""
        self._controllers[resource] = controller

    def node_status(self) -> dict[str, Any]:
        capacity = self.manager.capacity()
        allocatable = self.manager.allocatable()
        resources: dict[str, Any] = {}
        for resource in capacity:
            endpoint = self.manager.current_endpoint(resource)
            resources[resource] = {
                "capacity": capacity[resource],
                "allocatable": allocatable.get(resource, 0),
                "plugin_connected": endpoint is not None,
                "devices": [
                    {"id": d.id, "health": d.health, "numa_nodes": list(d.numa_nodes)}
                    for d in self.manager.devices(resource)
                ],
            }
        return {"resources": resources}

    def plugin_status(self) -> dict[str, Any]:
        """Each in-process plugin's own devices, which may be ahead of what the kubelet has
        heard from its ListAndWatch stream."""
        return {
            "plugins": {
                resource: {
                    "devices": [
                        {"id": device_id, "health": health}
                        for device_id, health in sorted(controller.devices())
                    ]
                }
                for resource, controller in sorted(self._controllers.items())
            }
        }

    # --- control interface ----------------------------------------------------------------

    def handle_control(self, request: dict[str, Any]) -> Any:
        op = request["op"]
        try:
            if op == "pod.create":
                containers = request.get("containers") or [{"name": "main", "requests": {}}]
                if not isinstance(containers, list):
                    raise ControlError("'containers' must be a list")
                specs = [container_spec_from_json(c) for c in containers]
                pod = self.create_pod(_text(request, "namespace"), _text(request, "name"), specs)
                return describe_pod(pod, self.manager)
            if op == "pod.delete":
                pod = self.delete_pod(_text(request, "namespace"), _text(request, "name"))
                return pod.to_json()
            if op == "pod.list":
                return {"pods": [describe_pod(p, self.manager) for p in self.pods.active()]}
            if op == "node.status":
                return self.node_status()
            if op == "plugin.status":
                return self.plugin_status()
            if op in ("device.health", "device.unplug", "device.plug"):
                return self._device_op(op, request)
        except (AdmissionError, PodSpecError) as e:
            raise ControlError(str(e)) from e
        raise ControlError(f"unknown op {op!r}")

    def _device_op(self, op: str, request: dict[str, Any]) -> dict[str, Any]:
        resource = _text(request, "resource")
        device_id = _text(request, "device_id")
        controller = self._controllers.get(resource)
        if controller is None:
            if self.manager.known_resource(resource):
                raise ControlError(
                    f"the device plugin for {resource} runs in a separate process and is not "
                    "reachable from the sim-kubelet; only plugins started by sim-node can be "
                    "changed through sim-ctl"
                )
            raise ControlError(f"no device plugin for {resource} is known to this kubelet")
        try:
            if op == "device.health":
                health = _text(request, "health")
                if health not in HEALTH_VALUES:
                    raise ControlError(f"health must be one of {', '.join(HEALTH_VALUES)}")
                controller.set_health(device_id, health)
            elif op == "device.unplug":
                controller.unplug(device_id)
            else:
                controller.plug(device_id)
        except (KeyError, ValueError) as e:
            raise ControlError(f"{resource} {device_id}: {e.args[0] if e.args else e}") from e
        return {"resource": resource, "device_id": device_id, "op": op}


def _text(request: dict[str, Any], key: str) -> str:
    value = request.get(key)
    if not isinstance(value, str) or not value:
        raise ControlError(f"'{key}' must be a non-empty string")
    return value
