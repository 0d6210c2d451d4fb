"""What the demo prints once the service is ready: where everything is and what to try."""

from __future__ import annotations

from typing import TYPE_CHECKING

from devicedeck.demo.environment import PREFIX, ignored_settings, user_settings
from devicedeck.demo.layout import advertise_command, cli_name, is_loopback
from devicedeck.demo.topology import DEMO_FAULT_SECONDS, DEMO_UNPLUG_SECONDS, TOPOLOGY
from devicedeck.sim.apiserver.server import url_host

if TYPE_CHECKING:
    from devicedeck.demo.runner import Demo

# The node whose agent the outage example stops: its health is derived, the simplest node.
OUTAGE_NODE = TOPOLOGY[1].name


def outage_pattern(server: str, node: str = OUTAGE_NODE) -> str:
    """A pkill pattern that matches this demo's agent for `node` and nothing else."""
    return f"agent --node {node} --server {server}"


def banner(demo: Demo) -> list[str]:
    layout = demo.layout
    lines = [""]
    for node in TOPOLOGY:
        plugins = ", ".join(f"{p.count} x {p.resource}" for p in node.plugins)
        lines.append(
            f"  node {node.name:<9} {plugins}   (kubelet root {layout.kubelet_root(node)})"
        )
        for plugin in node.plugins:
            faults = [f"after {DEMO_FAULT_SECONDS:g} s {d} fails" for d in plugin.made_unhealthy]
            faults += [
                f"after {DEMO_UNPLUG_SECONDS:g} s {d} is unplugged" for d in plugin.unplugged
            ]
            if faults:
                lines.append(
                    f"    {plugin.resource} health is derived from the kubelet: "
                    f"{', '.join(faults)}; the Node's status tells which is which"
                )
    if layout.kubelet_dir.parent != layout.data_dir:
        lines.append(
            f"  (kubelet roots are in {layout.kubelet_dir}, as unix socket paths "
            "must stay under 108 bytes)"
        )
    lines.append(f"  logs: {layout.logs_dir}   agent tokens: {layout.data_dir / 'tokens'}")
    lines.append(
        "  To change things from the dashboard (advertise a resource), sign in with the "
        f"admin token in {layout.admin_token_file}"
    )
    lines += ["", *_settings(demo), "", *_cluster(demo), "", *_watching(demo), ""]
    if is_loopback(demo.host):
        reach = f"  !! {url_host(demo.host)}:{demo.port} on this machine"
    else:
        reach = f"  !! port {demo.port} of {demo.host} FROM YOUR NETWORK"
    lines += [
        "  !! AUTHENTICATION IS OFF for this local demo: anyone who can reach",
        f"{reach} can read the inventory. Run",
        "  !! `devicedeck serve` (DEVICEDECK_AUTH=token is the default) for anything else.",
        "",
        f"  Try: {cli_name()} sim-ctl --root {layout.kubelet_root(TOPOLOGY[0])} pod create "
        "demo/my-job --request nvidia.com/gpu=2",
        "",
        f"Dashboard: {demo.base_url}",
        f"API:       {demo.base_url}api/v1/nodes   (OpenAPI docs at {demo.base_url}docs)",
        "Press Ctrl-C to stop.",
    ]
    return lines


def _settings(demo: Demo) -> list[str]:
    """Which of the environment's settings the service took, by name only (values may be
    secrets), and which the demo set itself."""
    ignored = ignored_settings(demo.environ)
    taken = sorted(PREFIX + name for name in user_settings(demo.environ))
    taken = [name for name in taken if name not in ignored]
    lines = [
        "  Settings: the service takes the DEVICEDECK_ variables of this environment"
        + (f" ({', '.join(taken)})" if taken else " (none set)")
    ]
    if ignored:
        lines.append(f"    ignored, as the demo sets them itself: {', '.join(ignored)}")
    return lines


def _cluster(demo: Demo) -> list[str]:
    layout = demo.layout
    lines = [
        f"  Cluster: a simulated API server at {demo.cluster_url}"
        f"   (also in {layout.apiserver_url_file})",
        f"    kubectl --kubeconfig {layout.kubeconfig} get nodes",
        "    Advertise an extended resource by hand, as the Kubernetes documentation does:",
    ]
    command = advertise_command(demo.cluster_url, TOPOLOGY[0].name)
    lines += [f"    {line}" for line in command.splitlines()]
    return lines


def _watching(demo: Demo) -> list[str]:
    host = url_host(demo.host)
    agents = ", ".join(
        f"{name} http://{host}:{port}/metrics" for name, port in demo.metrics_ports.items()
    )
    pattern = outage_pattern(demo.server)
    return [
        f"  Metrics: service {demo.base_url}metrics; agents {agents}",
        f"  Notifications: each webhook message the service sends is logged in "
        f"{demo.layout.webhook_log}",
        f"  An outage: pkill -STOP -f '{pattern}' freezes {OUTAGE_NODE}'s agent; within"
        " 20 s the node is stale and DevicedeckNodeStale fires;",
        f"    pkill -CONT -f '{pattern}' and it resolves.",
    ]
