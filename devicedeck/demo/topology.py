"""The simulated cluster the demos run, described once.

`devicedeck demo` runs each node as one sim-node process (kubelet, plugins and workload
together) plus an agent; docker-compose.yml runs the same nodes as separate containers
(sim-kubelet, one sim-plugin per plugin, a workload driver, an agent) sharing a volume at
/var/lib/kubelet. Both are derived from TOPOLOGY, and a test holds docker-compose.yml to
the commands built here, so the two demos cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from devicedeck.kubelet.paths import (
    DEFAULT_KUBELET_ROOT,
    POD_RESOURCES_DIR_NAME,
    POD_RESOURCES_SOCKET_NAME,
    UNIX_SOCKET_PATH_MAX,
    default_plugin_socket_name,
    kubelet_socket,
)
from devicedeck.sim.kubelet.control import control_socket_path
from devicedeck.sim.node import DEFAULT_NUMA_BY_PROFILE

# Simulated device ids derive from (node, resource, seed); one seed keeps them stable.
DEVICE_ID_SEED = 0
# The demos step their workloads and push snapshots faster than production defaults, so a
# newcomer sees pods come and go within seconds.
WORKLOAD_INTERVAL_SECONDS = 2.0
AGENT_INTERVAL_SECONDS = 2.0
# Agents may start before the service answers; a short backoff cap gets their first
# snapshots in soon after it does.
AGENT_MAX_BACKOFF_SECONDS = 2.0
# Separate sim-plugin containers cannot be flapped by the workload (it reaches plugins
# only in-process), so in compose each plugin flaps its own devices about this often.
COMPOSE_FLAP_INTERVAL_SECONDS = 45.0
# When the demo's scripted device faults happen, after a node starts: late enough for the
# agent to have seen the devices, soon enough to watch it happen.
DEMO_FAULT_SECONDS = 30.0
# When the demo unplugs a device, after a node starts: a clear interval after the fault, so
# the Node's status has counted the failed device before capacity falls. Failing and
# unplugging at the same moment would leave the counts unable to say which went.
DEMO_UNPLUG_SECONDS = DEMO_FAULT_SECONDS + 20.0


@dataclass(frozen=True)
class PluginSpec:
    """One simulated device plugin. `key` names its compose service (NODE-plugin-KEY);
    `tap` has the agent open its own ListAndWatch stream on it, so its devices' health comes
    from the plugin itself rather than being derived from kubelet data."""

    key: str
    resource: str
    count: int
    profile: str
    tap: bool = False
    # Health-script lines "AT_SECONDS DEVICE_ID ACTION", run from the plugin's start.
    events: tuple[str, ...] = ()
    # Devices the node's workload makes flaky: most of this plugin's flaps land on them.
    flaky: int = 0

    @property
    def unplugged(self) -> tuple[str, ...]:
        """Devices the events leave unplugged."""
        state: dict[str, str] = {}
        for line in self.events:
            _, device, action = line.split()
            if action in ("unplug", "plug"):
                state[device] = action
        return tuple(d for d, action in state.items() if action == "unplug")

    @property
    def made_unhealthy(self) -> tuple[str, ...]:
        """Devices the events leave Unhealthy (and plugged in)."""
        state: dict[str, str] = {}
        for line in self.events:
            _, device, action = line.split()
            state[device] = action
        return tuple(d for d, action in state.items() if action == "Unhealthy")

    @property
    def numa(self) -> int:
        # sim-node chooses NUMA nodes by profile; the compose plugins are told the same.
        return DEFAULT_NUMA_BY_PROFILE[self.profile]

    @property
    def sim_node_arg(self) -> str:
        return f"{self.resource}:{self.count}:{self.profile}"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    plugins: tuple[PluginSpec, ...]
    workload_seed: int


TOPOLOGY: tuple[NodeSpec, ...] = (
    NodeSpec(
        "gpu-a",
        (
            # The simulated plugins send every change to every stream, so tapping is safe.
            # Two GPUs flap far more often than the rest: the reliability ranking's leaders.
            PluginSpec("gpu", "nvidia.com/gpu", 8, "gpu", tap=True, flaky=2),
            PluginSpec("mig", "nvidia.com/mig-1g.10gb", 7, "mig", tap=True),
        ),
        workload_seed=11,
    ),
    NodeSpec(
        "dongle-b",
        # Untapped, so health is derived: one dongle fails (the Node's capacity still counts
        # it) and later one is pulled out (capacity falls), and the service tells them apart.
        (
            PluginSpec(
                "dongle",
                "example.com/dongle",
                6,
                "dongle",
                events=(
                    f"{DEMO_FAULT_SECONDS:g} dongle-4 Unhealthy",
                    f"{DEMO_UNPLUG_SECONDS:g} dongle-5 unplug",
                ),
            ),
        ),
        workload_seed=22,
    ),
    NodeSpec(
        "mixed-c",
        (
            PluginSpec("gpu", "nvidia.com/gpu", 2, "gpu", flaky=1),
            PluginSpec("dongle", "example.com/dongle", 4, "dongle"),
        ),
        workload_seed=33,
    ),
)


def longest_socket_suffix(topology: tuple[NodeSpec, ...] = TOPOLOGY) -> int:
    """Bytes the longest socket path adds to a kubelet root (including the slash)."""
    root = Path("/")
    suffixes = [
        str(kubelet_socket(root)),
        str(root / POD_RESOURCES_DIR_NAME / POD_RESOURCES_SOCKET_NAME),
        str(control_socket_path(root)),
    ]
    for node in topology:
        for plugin in node.plugins:
            suffixes.append(
                str(kubelet_socket(root).parent / default_plugin_socket_name(plugin.resource))
            )
    return max(len(s.encode()) for s in suffixes)


def root_fits(root: Path, topology: tuple[NodeSpec, ...] = TOPOLOGY) -> bool:
    """Whether every socket under this kubelet root stays within the unix path limit."""
    return (
        len(str(root.absolute()).encode()) + longest_socket_suffix(topology) <= UNIX_SOCKET_PATH_MAX
    )


# --- commands (argv after `devicedeck`) ------------------------------------------------


def sim_node_args(node: NodeSpec, root: Path | str, kubeconfig: Path | str) -> list[str]:
    args = ["sim-node", "--root", str(root), "--node", node.name, "--seed", str(DEVICE_ID_SEED)]
    args += ["--kubeconfig", str(kubeconfig)]
    for plugin in node.plugins:
        args += ["--plugin", plugin.sim_node_arg]
    for plugin in node.plugins:
        for line in plugin.events:
            args += ["--health-event", f"{plugin.resource} {line}"]
    for plugin in node.plugins:
        if plugin.flaky:
            args += ["--flaky", f"{plugin.resource}:{plugin.flaky}"]
    args += [
        "--workload",
        str(node.workload_seed),
        "--workload-interval",
        f"{WORKLOAD_INTERVAL_SECONDS:g}",
    ]
    return args


# The node whose GPUs a simulated DRA driver also publishes, so the demo shows DRA devices
# (ResourceSlices and claims in the API server) beside device-plugin devices. The driver also
# serves their health stream under the node's kubelet root, which that node's agent reads.
DRA_NODE = "gpu-a"
DRA_DEVICES = 4


def sim_dra_driver_args(kubeconfig: Path | str, root: Path | str) -> list[str]:
    return [
        "sim-dra-driver",
        "--kubeconfig",
        str(kubeconfig),
        "--root",
        str(root),
        "--node",
        DRA_NODE,
        "--devices",
        str(DRA_DEVICES),
    ]


def sim_kubelet_args(node: NodeSpec, root: Path | str, kubeconfig: Path | str) -> list[str]:
    return [
        "sim-kubelet",
        "--root",
        str(root),
        "--node",
        node.name,
        "--kubeconfig",
        str(kubeconfig),
    ]


def sim_plugin_args(node: NodeSpec, plugin: PluginSpec, root: Path | str) -> list[str]:
    return [
        "sim-plugin",
        "--root",
        str(root),
        "--resource",
        plugin.resource,
        "--count",
        str(plugin.count),
        "--profile",
        plugin.profile,
        "--numa",
        str(plugin.numa),
        "--node",
        node.name,
        "--seed",
        str(DEVICE_ID_SEED),
        "--flap-interval",
        f"{COMPOSE_FLAP_INTERVAL_SECONDS:g}",
        *(arg for line in plugin.events for arg in ("--health-event", line)),
    ]


def workload_args(node: NodeSpec, root: Path | str) -> list[str]:
    return [
        "demo-workload",
        "--root",
        str(root),
        "--seed",
        str(node.workload_seed),
        "--interval",
        f"{WORKLOAD_INTERVAL_SECONDS:g}",
    ]


def agent_args(node: NodeSpec, root: Path | str, server: str, token_file: Path | str) -> list[str]:
    taps = [arg for p in node.plugins if p.tap for arg in ("--tap", p.resource)]
    dra = ["--dra-health"] if node.name == DRA_NODE else []
    return [
        "agent",
        "--node",
        node.name,
        "--server",
        server,
        "--token-file",
        str(token_file),
        "--kubelet-root",
        str(root),
        "--interval",
        f"{AGENT_INTERVAL_SECONDS:g}",
        "--max-backoff",
        f"{AGENT_MAX_BACKOFF_SECONDS:g}",
        *taps,
        *dra,
    ]


# --- docker compose ----------------------------------------------------------------------

COMPOSE_KUBELET_ROOT = str(DEFAULT_KUBELET_ROOT)
COMPOSE_SERVER_URL = "http://devicedeck:8000"
COMPOSE_TOKEN_DIR = "/var/lib/devicedeck/tokens"
# demo-token's template: each agent's own token, bound to its node.
COMPOSE_TOKEN_FILE = COMPOSE_TOKEN_DIR + "/{node}.token"
COMPOSE_APISERVER = "sim-apiserver"
COMPOSE_APISERVER_PORT = 6443
COMPOSE_CLUSTER_DIR = "/var/lib/devicedeck/cluster"
COMPOSE_KUBECONFIG_DIR = "/var/lib/devicedeck/kubeconfig"
COMPOSE_KUBECONFIG = f"{COMPOSE_KUBECONFIG_DIR}/kubeconfig"


def compose_apiserver_args() -> list[str]:
    return [
        "sim-apiserver",
        "--host",
        "0.0.0.0",
        "--port",
        str(COMPOSE_APISERVER_PORT),
        "--data-dir",
        COMPOSE_CLUSTER_DIR,
        "--kubeconfig-out",
        COMPOSE_KUBECONFIG,
        "--server-url",
        f"http://{COMPOSE_APISERVER}:{COMPOSE_APISERVER_PORT}",
    ]


def compose_volume(node: NodeSpec) -> str:
    return f"{node.name}-kubelet"


def compose_node_commands(node: NodeSpec) -> dict[str, list[str]]:
    """The compose services of one node, by service name, with their commands."""
    root = COMPOSE_KUBELET_ROOT
    services = {f"{node.name}-kubelet": sim_kubelet_args(node, root, COMPOSE_KUBECONFIG)}
    for plugin in node.plugins:
        services[f"{node.name}-plugin-{plugin.key}"] = sim_plugin_args(node, plugin, root)
    services[f"{node.name}-workload"] = workload_args(node, root)
    services[f"{node.name}-agent"] = agent_args(
        node, root, COMPOSE_SERVER_URL, COMPOSE_TOKEN_FILE.replace("{node}", node.name)
    )
    return services
