"""Finding a device plugin's socket for a resource, for ListAndWatch taps.

The kubelet learns a plugin's endpoint from its Register call, which nobody else can see,
so the agent looks, in this order:

1. the socket named with `--tap RESOURCE=SOCKET` (a name in device-plugins/ or a path);
2. plugin-watcher registrations: sockets in plugins_registry/ answering GetInfo with
   type DevicePlugin and name RESOURCE give the endpoint exactly;
3. device-plugins/<resource with '/' as '-'>.sock, the usual naming;
4. any other socket in device-plugins/ that answers GetDevicePluginOptions and whose first
   ListAndWatch message lists devices the kubelet reports for RESOURCE (allocatable,
   allocated or in the checkpoint). A socket that does not match is closed at once and not
   asked again while it exists. Probing opens a stream on plugins that are not tapped, which
   can cost one health event to a plugin sharing its health channel between streams (see
   taps): name the socket (1) in production. Sockets named after another resource the
   kubelet reports are never probed.

Candidate 3 is checked the same way once the kubelet has reported devices for the resource.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from devicedeck.kubelet.names import extended_resource_name_problem
from devicedeck.kubelet.paths import (
    KUBELET_SOCKET_NAME,
    KubeletPaths,
    default_plugin_socket_name,
    unix_target,
)
from devicedeck.kubelet.proto import pluginregistration_pb2, pluginregistration_pb2_grpc
from devicedeck.kubelet.socket_watch import socket_id

DEVICE_PLUGIN_TYPE = "DevicePlugin"
RPC_TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True)
class TapSpec:
    resource: str
    socket: str | None = None

    @classmethod
    def parse(cls, text: str) -> TapSpec:
        """RESOURCE or RESOURCE=SOCKET (a file name in device-plugins/ or a path)."""
        resource, sep, socket = text.partition("=")
        problem = extended_resource_name_problem(resource)
        if problem:
            raise ValueError(f"--tap {text!r}: resource name {problem}")
        if sep and not socket:
            raise ValueError(f"--tap {text!r}: SOCKET after '=' must not be empty")
        return cls(resource, socket or None)


@dataclass(frozen=True)
class Candidate:
    path: Path
    method: str
    # Accept only when the first message lists devices the kubelet knows for the resource.
    verify: bool


def _sockets_in(directory: Path) -> list[Path]:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [
        directory / n
        for n in names
        if not n.startswith(".") and socket_id(directory / n) is not None
    ]


def registry_endpoint(paths: KubeletPaths, resource: str) -> Path | None:
    """The DevicePlugin socket a plugin-watcher registration names for `resource`."""
    for socket_path in _sockets_in(paths.plugins_registry_dir):
        with grpc.insecure_channel(unix_target(socket_path)) as channel:
            stub = pluginregistration_pb2_grpc.RegistrationStub(channel)
            try:
                info = stub.GetInfo(
                    pluginregistration_pb2.InfoRequest(), timeout=RPC_TIMEOUT_SECONDS
                )
            except grpc.RpcError:
                continue
        if info.type != DEVICE_PLUGIN_TYPE or info.name != resource:
            continue
        # As the kubelet reads it: absolute as is, a bare name in device-plugins/, and
        # empty for a registration socket that serves DevicePlugin itself.
        if not info.endpoint:
            return socket_path
        endpoint = Path(info.endpoint)
        return endpoint if endpoint.is_absolute() else paths.device_plugins_dir / endpoint
    return None


def candidates(
    paths: KubeletPaths,
    spec: TapSpec,
    *,
    known_devices: set[str],
    skip: Callable[[Path], bool],
    other_resources: frozenset[str] | set[str] = frozenset(),
) -> Iterator[Candidate]:
    if spec.socket is not None:
        explicit = Path(spec.socket)
        if not explicit.is_absolute():
            explicit = paths.device_plugins_dir / explicit
        yield Candidate(explicit, "named", verify=False)
        return
    endpoint = registry_endpoint(paths, spec.resource)
    if endpoint is not None:
        yield Candidate(endpoint, "plugin_registry", verify=False)
    conventional = paths.device_plugins_dir / default_plugin_socket_name(spec.resource)
    if socket_id(conventional) is not None and not skip(conventional):
        yield Candidate(conventional, "socket_name", verify=bool(known_devices))
    if not known_devices:
        return
    # Sockets whose names share a word with the resource go first (nvidia.com/gpu ->
    # nvidia-gpu.sock), so a probe usually hits the right plugin straight away.
    words = {w for w in spec.resource.replace(".", "/").replace("-", "/").split("/") if w}
    # A socket named after another resource the kubelet reports is that resource's plugin;
    # probing it would only risk taking its health events.
    taken = {default_plugin_socket_name(r) for r in other_resources if r != spec.resource}
    taken.add(KUBELET_SOCKET_NAME)
    others = [
        p
        for p in _sockets_in(paths.device_plugins_dir)
        if p.name not in taken and p != conventional and not skip(p)
    ]
    others.sort(key=lambda p: -sum(w in p.name for w in words))
    for path in others:
        yield Candidate(path, "probe", verify=True)
