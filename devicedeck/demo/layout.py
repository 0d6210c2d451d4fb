"""Where the demo keeps its things, and the small checks and helpers it starts with."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import ipaddress
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devicedeck.demo.topology import TOPOLOGY, NodeSpec, root_fits


class DemoError(Exception):
    """The demo cannot start; the message says why and what to do."""


@dataclass(frozen=True)
class DemoLayout:
    data_dir: Path
    kubelet_dir: Path

    @classmethod
    def for_data_dir(cls, data_dir: Path) -> DemoLayout:
        data_dir = data_dir.absolute()
        kubelet_dir = data_dir / "kubelet"
        if not all(root_fits(kubelet_dir / node.name) for node in TOPOLOGY):
            # Unix socket paths are limited to 107 bytes: a deep data directory moves the
            # kubelet roots to a short directory named after it, stable across runs.
            digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
            kubelet_dir = Path("/tmp") / f"devicedeck-{digest}"
        return cls(data_dir, kubelet_dir)

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.data_dir / 'devicedeck.db'}"

    def token_file(self, node: str) -> Path:
        """Each agent's own token, bound to its node."""
        return self.data_dir / "tokens" / f"{node}.token"

    @property
    def admin_token_file(self) -> Path:
        return self.data_dir / "admin.token"

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def cluster_dir(self) -> Path:
        return self.data_dir / "cluster"

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    @property
    def lock_file(self) -> Path:
        return self.data_dir / ".demo.lock"

    @property
    def webhook_log(self) -> Path:
        """What the demo's webhook receiver logs: every alert the service sends."""
        return self.logs_dir / "webhooks.log"

    @property
    def apiserver_url_file(self) -> Path:
        """The simulated API server's URL (its port changes on every start), for scripts."""
        return self.data_dir / "apiserver-url"

    def kubelet_root(self, node: NodeSpec) -> Path:
        return self.kubelet_dir / node.name


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def make_data_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DemoError(f"cannot use {path} as the data directory: {e.strerror or e}") from e


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    with lock_file.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise DemoError(
                f"another demo is running with the data directory {lock_file.parent}; "
                "stop it first, or pass a different --data-dir"
            ) from e
        yield


def check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise DemoError(f"port {port} on {host} is in use; pass --port") from e
            raise DemoError(f"cannot listen on {host}:{port}: {e.strerror}") from e


def advertise_command(cluster_url: str, node: str) -> str:
    """The curl command of the Kubernetes documentation's extended-resource procedure."""
    patch = '[{"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "4"}]'
    return (
        'curl --header "Content-Type: application/json-patch+json" \\\n'
        "  --request PATCH \\\n"
        f"  --data '{patch}' \\\n"
        f"  {cluster_url}/api/v1/nodes/{node}/status"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now. Its process binds it a moment later; another process
    taking it in between makes that process exit, which the demo reports like any child
    failing."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def kubeconfig_server(path: Path) -> str:
    """The server URL of a kubeconfig's first cluster."""
    import yaml

    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    return str(config["clusters"][0]["cluster"]["server"])


def cli_name() -> str:
    """How the user can run `devicedeck` from here: the entry point beside this Python."""
    script = Path(sys.executable).parent / "devicedeck"
    if not script.exists():
        return "devicedeck"
    with contextlib.suppress(ValueError):
        return str(script.relative_to(Path.cwd()))
    return str(script)
