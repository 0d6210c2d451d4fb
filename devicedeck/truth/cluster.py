"""The simulated cluster the oracle runs: the demo's nodes, API server, DRA driver, agents
and the service, as separate processes it can kill and start again.

The nodes are the demo's (devicedeck/demo/topology.py) without their own workload and
scripted faults: every change comes from the oracle, which therefore knows when each was
made. The service runs on SQLite in the data directory, or on the database given."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from devicedeck.demo.agent_credentials import AgentCredentials
from devicedeck.demo.layout import DemoLayout, free_port
from devicedeck.demo.processes import Child, Children
from devicedeck.demo.topology import (
    DEVICE_ID_SEED,
    TOPOLOGY,
    NodeSpec,
    agent_args,
    sim_dra_driver_args,
)
from devicedeck.sim.apiserver.server import write_kubeconfig
from devicedeck.sim.apiserver.store import Store
from devicedeck.sim.kubelet.control import ControlError, call, control_socket_path
from devicedeck.truth.disruptions import EVERY_NODE

TIER_CLUSTER, TIER_SERVICE, TIER_NODES, TIER_AGENTS = 0, 1, 2, 3
# The oracle restarts what it kills at once; the service's window covers the rest.
RESTART_DELAY_SECONDS = 1.0
STALE_AFTER_SECONDS = 10.0
AGENT_HEARTBEAT_SECONDS = 3.0
READY_TIMEOUT_SECONDS = 120.0
PROBE_TIMEOUT_SECONDS = 5.0

SERVICE = "service"
APISERVER = "sim-apiserver"


def node_args(node: NodeSpec, root: Path, kubeconfig: Path) -> list[str]:
    """sim-node for one of the demo's nodes, with no workload or scripted faults of its own."""
    args = ["sim-node", "--root", str(root), "--node", node.name, "--seed", str(DEVICE_ID_SEED)]
    args += ["--kubeconfig", str(kubeconfig)]
    for plugin in node.plugins:
        args += ["--plugin", plugin.sim_node_arg]
    return args


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_SECONDS) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Member:
    """A process of the cluster: how to tell it answers, and which nodes it affects."""

    child: Child
    ready: Callable[[], bool]
    node: str  # a node name, or EVERY_NODE


class Cluster:
    def __init__(
        self,
        data_dir: Path,
        database_url: str | None,
        webhook_url: str,
        log: Callable[[str], None],
        topology: tuple[NodeSpec, ...] = TOPOLOGY,
    ) -> None:
        self.layout = DemoLayout.for_data_dir(data_dir)
        self.topology = topology
        self.database_url = database_url or self.layout.database_url
        self.webhook_url = webhook_url
        self.log = log
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.children = Children({"PYTHONUNBUFFERED": "1", **_path_env()}, self.layout.data_dir)
        self.members: dict[str, Member] = {}
        self._credentials: AgentCredentials | None = None

    @property
    def roots(self) -> dict[str, Path]:
        return {node.name: self.layout.kubelet_root(node) for node in self.topology}

    @property
    def derived(self) -> frozenset[tuple[str, str]]:
        return frozenset(
            (node.name, plugin.resource)
            for node in self.topology
            for plugin in node.plugins
            if not plugin.tap
        )

    def start(self) -> None:
        """Start everything and wait until every process answers."""
        layout = self.layout
        layout.data_dir.mkdir(parents=True, exist_ok=True)
        logs = layout.logs_dir
        token = Store(layout.cluster_dir).admin_token
        apiserver_port = free_port()
        cluster_url = f"http://127.0.0.1:{apiserver_port}"
        write_kubeconfig(layout.kubeconfig, cluster_url, token)
        apiserver = self.children.start(
            APISERVER,
            [
                "sim-apiserver",
                "--port",
                str(apiserver_port),
                "--data-dir",
                str(layout.cluster_dir),
                "--kubeconfig-out",
                str(layout.kubeconfig),
            ],
            logs / "sim-apiserver.log",
            TIER_CLUSTER,
            restart_delay=RESTART_DELAY_SECONDS,
        )
        self.members[APISERVER] = Member(
            apiserver, lambda: _http_ok(cluster_url + "/readyz"), EVERY_NODE
        )
        service = self.children.start(
            SERVICE,
            ["serve", "--host", "127.0.0.1", "--port", str(self.port)],
            logs / "service.log",
            TIER_SERVICE,
            env={
                "DEVICEDECK_DATABASE_URL": self.database_url,
                "DEVICEDECK_AUTH": "off",
                "DEVICEDECK_KUBE": "kubeconfig",
                "DEVICEDECK_KUBECONFIG": str(layout.kubeconfig),
                "DEVICEDECK_STALE_AFTER": f"{STALE_AFTER_SECONDS:g}",
                "DEVICEDECK_WEBHOOK_URL": self.webhook_url,
            },
            restart_delay=RESTART_DELAY_SECONDS,
        )
        self.members[SERVICE] = Member(
            service, lambda: _http_ok(self.base_url + "/readyz"), EVERY_NODE
        )
        for node in self.topology:
            root = layout.kubelet_root(node)
            root.mkdir(parents=True, exist_ok=True)
            child = self.children.start(
                f"node {node.name}",
                node_args(node, root, layout.kubeconfig),
                logs / f"node-{node.name}.log",
                TIER_NODES,
                restart_delay=RESTART_DELAY_SECONDS,
            )
            self.members[child.name] = Member(child, _node_ready(node, root), node.name)
        if any(node.name == "gpu-a" for node in self.topology):
            dra_root = self.roots["gpu-a"]
            self.children.start(
                "sim-dra-driver",
                sim_dra_driver_args(layout.kubeconfig, dra_root),
                logs / "sim-dra-driver.log",
                TIER_NODES,
                restart_delay=RESTART_DELAY_SECONDS,
            )
        self._credentials = AgentCredentials(
            layout.kubeconfig,
            [(node.name, layout.token_file(node.name)) for node in self.topology],
            threading.Event(),
        )
        self._credentials.start()
        self._wait(self._credentials.all_issued, "the agents' tokens")
        for node in self.topology:
            metrics_port = free_port()
            args = agent_args(
                node, layout.kubelet_root(node), self.base_url, layout.token_file(node.name)
            )
            args += ["--heartbeat", f"{AGENT_HEARTBEAT_SECONDS:g}"]
            args += ["--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port)]
            child = self.children.start(
                f"agent {node.name}",
                args,
                logs / f"agent-{node.name}.log",
                TIER_AGENTS,
                restart_delay=RESTART_DELAY_SECONDS,
            )
            metrics = f"http://127.0.0.1:{metrics_port}/metrics"
            self.members[child.name] = Member(child, _bind(_http_ok, metrics), node.name)
        for name, member in self.members.items():
            self._wait(member.ready, name)

    def _wait(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not done():
            self.children.supervise(self.log)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready in {READY_TIMEOUT_SECONDS:g} s")
            time.sleep(0.2)

    def supervise(self) -> None:
        self.children.supervise(self.log)

    def kill(self, name: str, signum: signal.Signals) -> bool:
        """Send a signal to a member's process group; the supervision starts it again."""
        child = self.members[name].child
        if not child.running or child.process is None:
            return False
        try:
            os.killpg(child.process.pid, signum)
        except ProcessLookupError:
            return False
        return True

    def stop(self) -> None:
        if self._credentials is not None:
            self._credentials.stop.set()
            self._credentials.join(timeout=5)
        self.children.stop_all()


def _bind(probe: Callable[[str], bool], url: str) -> Callable[[], bool]:
    return lambda: probe(url)


def _node_ready(node: NodeSpec, root: Path) -> Callable[[], bool]:
    wanted = {plugin.resource for plugin in node.plugins}

    def ready() -> bool:
        try:
            status = call(control_socket_path(root), {"op": "plugin.status"}, timeout=5)
        except (ControlError, OSError, ValueError):
            return False
        return set(status["plugins"]) == wanted

    return ready


def _path_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DEVICEDECK_")}
