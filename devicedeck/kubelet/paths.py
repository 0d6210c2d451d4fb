"""Where the kubelet keeps its sockets and files, relative to a kubelet root directory.

The real root is /var/lib/kubelet; simulated nodes and tests use the same layout under
any directory, so the code reading a real node and a simulated one is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_KUBELET_ROOT = Path("/var/lib/kubelet")

DEVICE_PLUGINS_DIR_NAME = "device-plugins"
KUBELET_SOCKET_NAME = "kubelet.sock"
CHECKPOINT_FILE_NAME = "kubelet_internal_checkpoint"
POD_RESOURCES_DIR_NAME = "pod-resources"
POD_RESOURCES_SOCKET_NAME = "kubelet.sock"
PLUGINS_REGISTRY_DIR_NAME = "plugins_registry"
PLUGINS_DIR_NAME = "plugins"
# The DRA kubelet-plugin helper (k8s.io/dynamic-resource-allocation/kubeletplugin) creates
# dra.sock (dra-<UID>.sock while a rolling update runs two instances) in plugins/<driver>/.
DRA_SOCKET_NAME = "dra.sock"

# sun_path holds 108 bytes including the terminating NUL; longer paths cannot be bound.
UNIX_SOCKET_PATH_MAX = 107


def device_plugins_dir(root: Path | str) -> Path:
    return Path(root) / DEVICE_PLUGINS_DIR_NAME


def kubelet_socket(root: Path | str) -> Path:
    """The socket the kubelet serves the device plugin Registration service on."""
    return device_plugins_dir(root) / KUBELET_SOCKET_NAME


def checkpoint_path(root: Path | str) -> Path:
    """The device manager checkpoint, kubelet_internal_checkpoint."""
    return device_plugins_dir(root) / CHECKPOINT_FILE_NAME


def pod_resources_dir(root: Path | str) -> Path:
    return Path(root) / POD_RESOURCES_DIR_NAME


def pod_resources_socket(root: Path | str) -> Path:
    """The socket the kubelet serves the PodResources API on."""
    return pod_resources_dir(root) / POD_RESOURCES_SOCKET_NAME


def plugins_registry_dir(root: Path | str) -> Path:
    """Where plugin-watcher plugins (DRA, CSI, device plugins) put their sockets."""
    return Path(root) / PLUGINS_REGISTRY_DIR_NAME


def plugins_dir(root: Path | str) -> Path:
    """Where CSI and DRA drivers keep their service sockets, one directory per driver."""
    return Path(root) / PLUGINS_DIR_NAME


def dra_plugin_socket(root: Path | str, driver: str) -> Path:
    """A DRA driver's socket in its default place: the kubelet's client end of DRAPlugin and
    DRAResourceHealth calls."""
    return plugins_dir(root) / driver / DRA_SOCKET_NAME


def default_plugin_socket_name(resource_name: str) -> str:
    """A socket file name for a resource: example.com/dongle -> example.com-dongle.sock."""
    return resource_name.replace("/", "-") + ".sock"


def unix_target(path: Path | str) -> str:
    """A gRPC channel target for a unix socket path (absolute, so cwd does not matter)."""
    return "unix:" + str(Path(path).absolute())


def check_socket_path(path: Path | str) -> None:
    """Raise ValueError when a socket path is too long to bind, naming the limit."""
    length = len(str(Path(path).absolute()).encode())
    if length > UNIX_SOCKET_PATH_MAX:
        raise ValueError(
            f"unix socket path {path} is {length} bytes; the limit is {UNIX_SOCKET_PATH_MAX}"
        )


@dataclass(frozen=True)
class KubeletPaths:
    """All kubelet locations under one root, for callers that pass the layout around."""

    root: Path

    @property
    def device_plugins_dir(self) -> Path:
        return device_plugins_dir(self.root)

    @property
    def kubelet_socket(self) -> Path:
        return kubelet_socket(self.root)

    @property
    def checkpoint(self) -> Path:
        return checkpoint_path(self.root)

    @property
    def pod_resources_dir(self) -> Path:
        return pod_resources_dir(self.root)

    @property
    def pod_resources_socket(self) -> Path:
        return pod_resources_socket(self.root)

    @property
    def plugins_registry_dir(self) -> Path:
        return plugins_registry_dir(self.root)

    @property
    def plugins_dir(self) -> Path:
        return plugins_dir(self.root)

    def make_dirs(self) -> None:
        """Create the directories the kubelet creates at start (mode 0700, like the kubelet)."""
        for directory in (
            self.device_plugins_dir,
            self.pod_resources_dir,
            self.plugins_registry_dir,
        ):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
