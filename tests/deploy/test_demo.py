"""`devicedeck demo` as a user runs it: a real process tree, stopped with Ctrl-C (SIGINT),
started again on the same data directory."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from core.webhook_receiver import WebhookReceiver, running

from devicedeck.demo.topology import TOPOLOGY

from .demo_cluster import DATA_TIMEOUT, exercise_the_cluster, get
from .demo_watch import (
    OUTAGE_NODE,
    log_line_problems,
    metrics_text,
    printed_agent_metrics,
    stale_alerts,
    stop_an_agent_then_continue_it,
)
from .helpers import REPO, wait_for_dashboard, wait_until

pytestmark = pytest.mark.slow

STARTUP_TIMEOUT = 180.0
# Deadlines for outcomes, generous so a busy machine passes; the demo's speed is not tested.
STOP_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def descendants(pid: int) -> dict[int, str]:
    """pid -> start time of every process below pid (start time guards against pid reuse)."""
    children: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        starts[int(entry.name)] = fields[19]
    found: dict[int, str] = {}
    pending = list(children.get(pid, []))
    while pending:
        child = pending.pop()
        found[child] = starts[child]
        pending.extend(children.get(child, []))
    return found


def still_running(processes: dict[int, str]) -> list[int]:
    alive = []
    for pid, start in processes.items():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[19] == start and fields[0] != "Z":
            alive.append(pid)
    return alive


def dashboard_page(port: int) -> str:
    """The page at the printed URL: the dashboard itself, no login (auth is off)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
        assert response.status == 200
        assert response.headers["content-type"].startswith("text/html")
        assert response.url == f"http://127.0.0.1:{port}/", "redirected, to a login page?"
        return str(response.read().decode())


@dataclass
class Run:
    output: str
    exit_code: int
    nodes: dict[str, Any]
    children: dict[int, str]
    dashboard: str
    cluster: dict[str, Any]
    # node -> who the service credited with the node's first snapshot
    added_by: dict[str, str]
    crash: dict[str, Any]
    # What `during` found while the demo ran.
    during: dict[str, Any]
    # Lines of the demo's logs that are not whole lines of the format it was asked for.
    log_problems: list[str]


# A node's processes wait 30 s before they start again; the rest is a busy machine's margin.
RESTART_TIMEOUT = 120.0


def _argv(pid: int) -> list[bytes]:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat[stat.rindex(")") + 2 :].split()[0] == "Z":
            return []
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def agent_pids(pids: Iterable[int], node: str) -> list[int]:
    """Which of these processes are a live `devicedeck agent --node NODE`."""
    found = []
    for pid in pids:
        argv = _argv(pid)
        if "agent" in (a.decode(errors="replace") for a in argv) and node.encode() in argv:
            found.append(pid)
    return found


def agent_pid(demo_pid: int, node: str) -> int | None:
    """The pid of the demo's agent for `node`, if one runs."""
    found = agent_pids(descendants(demo_pid), node)
    return found[0] if found else None


def agents_anywhere(node: str, data_dir: Path) -> list[int]:
    """Agents for `node` with a token file in data_dir, whoever their parent is now."""
    token = str(data_dir / "tokens" / f"{node}.token").encode()
    pids = [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    return [pid for pid in agent_pids(pids, node) if token in _argv(pid)]


def node_stale(port: int, node: str) -> bool:
    return bool(get(port, f"/api/v1/nodes/{node}")["stale"])


def kill_an_agent_and_see_it_come_back(
    port: int, demo_pid: int, log: Path, data_dir: Path
) -> dict[str, Any]:
    """SIGKILL one node's agent: the node turns stale, the demo starts the agent again, and
    the node is fresh again; the demo's webhook receiver logs the stale alert firing, then
    resolved."""
    node = TOPOLOGY[1].name
    wait_until(lambda: not node_stale(port, node), DATA_TIMEOUT, f"{node} fresh at first")
    webhook_log = data_dir / "logs" / "webhooks.log"
    before = len(stale_alerts(webhook_log, node))
    old = agent_pid(demo_pid, node)
    assert old is not None
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: node_stale(port, node), DATA_TIMEOUT, f"{node} stale once its agent died")
    new: list[int] = []

    def started_again() -> bool:
        pid = agent_pid(demo_pid, node)
        new[:] = [pid] if pid is not None and pid != old else []
        return bool(new)

    wait_until(started_again, RESTART_TIMEOUT, f"a new agent for {node}")
    wait_until(lambda: not node_stale(port, node), DATA_TIMEOUT, f"{node} fresh again")
    wait_until(
        lambda: stale_alerts(webhook_log, node)[before:] == ["firing", "resolved"],
        DATA_TIMEOUT,
        f"DevicedeckNodeStale firing and resolved for {node}",
    )
    return {"node": node, "old": old, "new": new[0], "output": log.read_text()}


def kill_an_agent_then_stop_the_demo(
    port: int, demo_pid: int, log: Path, data_dir: Path
) -> dict[str, Any]:
    """SIGKILL one node's agent and stop the demo while the agent waits to start again."""
    node = TOPOLOGY[2].name
    old = agent_pid(demo_pid, node)
    assert old is not None
    os.kill(old, signal.SIGKILL)
    wait_until(
        lambda: f"agent {node} stopped unexpectedly" in log.read_text(),
        DATA_TIMEOUT,
        "the demo noticing the agent died",
    )
    return {"node": node, "old": old}


Scenario = Callable[[int, int, Path, Path], dict[str, Any]]


def run_demo_until_data(
    data_dir: Path,
    log: Path,
    exercise: bool = False,
    program: Sequence[str] = (sys.executable, "-m", "devicedeck.cli"),
    cwd: Path = REPO,
    crash: Scenario | None = None,
    settings: Mapping[str, str] | None = None,
    during: Scenario | None = None,
) -> Run:
    """Start the demo with these DEVICEDECK_ settings in its environment, wait for nodes with
    devices and pods, exercise it, crash a part of it and run `during` if asked, Ctrl-C it,
    wait for the end. Scenarios get the port, the demo's pid, its output and data dir."""
    port = free_port()
    command = [*program, "demo", "--port", str(port)]
    command += ["--data-dir", str(data_dir)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVICEDECK_")}
    env |= settings or {}
    with (
        log.open("w") as out,
        subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env) as demo,
    ):
        try:
            wait_for_dashboard(demo, log, f"http://127.0.0.1:{port}", STARTUP_TIMEOUT)
            nodes: dict[str, Any] = {}

            def everything_shows() -> bool:
                nodes.clear()
                nodes.update({n["name"]: n for n in get(port, "/api/v1/nodes")["results"]})
                return set(nodes) == {n.name for n in TOPOLOGY} and all(
                    sum(c["allocated"] for c in nodes[n.name]["resources"].values()) > 0
                    for n in TOPOLOGY
                )

            wait_until(everything_shows, DATA_TIMEOUT, f"nodes with devices and pods: {nodes}")
            events = get(port, "/api/v1/events?kind=device_added&limit=500")["results"]
            added_by = {e["node"]: e["actor"] for e in events}
            dashboard = dashboard_page(port)
            cluster = exercise_the_cluster(port, data_dir) if exercise else {}
            crashed = crash(port, demo.pid, log, data_dir) if crash is not None else {}
            seen = during(port, demo.pid, log, data_dir) if during is not None else {}
            children = descendants(demo.pid)
            demo.send_signal(signal.SIGINT)
            code = demo.wait(timeout=STOP_TIMEOUT)
        finally:
            if demo.poll() is None:
                # The test failed midway: do not leave a demo running.
                for pid in descendants(demo.pid):
                    os.kill(pid, signal.SIGKILL)
                demo.kill()
                demo.wait()
    log_format = (settings or {}).get("DEVICEDECK_LOG_FORMAT", "text")
    problems = log_line_problems(data_dir / "logs", log_format)
    return Run(
        log.read_text(),
        code,
        nodes,
        children,
        dashboard,
        cluster,
        added_by,
        crashed,
        seen,
        problems,
    )


@pytest.fixture(scope="module")
def data_dir() -> Iterator[Path]:
    # Short on purpose: the kubelet roots live inside it (unix socket path limit).
    base = Path(tempfile.mkdtemp(prefix="dd", dir="/tmp"))
    try:
        yield base / "data"
    finally:
        shutil.rmtree(base, ignore_errors=True)


# A user's own receiver, with credentials in its URL, beside the demo's.
HOOK_PASSWORD = "h00k-pa55-7c1e"
LINK_TEMPLATE = "https://grafana.example/d/gpu?var-uuid={device_id}"


@pytest.fixture(scope="module")
def own_receiver() -> Iterator[WebhookReceiver]:
    with running(WebhookReceiver()) as receiver:
        yield receiver


def look_around(port: int, demo_pid: int, log: Path, data_dir: Path) -> dict[str, Any]:
    """What the README points at besides the dashboard: every agent's /metrics at the port
    printed, the service's per-device series, a device page's link out, and an outage told
    by the webhook receiver."""
    output = log.read_text()
    agents = {node: metrics_text(url) for node, url in printed_agent_metrics(output).items()}
    service = metrics_text(f"http://127.0.0.1:{port}/metrics")
    device = get(port, "/api/v1/devices?limit=1")["results"][0]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/devices/{device['id']}") as page:
        device_page = page.read().decode()
    pid = agent_pid(demo_pid, OUTAGE_NODE)
    assert pid is not None
    outage = stop_an_agent_then_continue_it(port, pid, f"http://127.0.0.1:{port}", data_dir)
    return {"agents": agents, "service": service, "device_page": device_page, "outage": outage}


@pytest.fixture(scope="module")
def first_run(data_dir: Path, own_receiver: WebhookReceiver) -> Run:
    own_url = f"http://demo:{HOOK_PASSWORD}@127.0.0.1:{own_receiver.port}/hook"
    return run_demo_until_data(
        data_dir,
        data_dir.parent / "first.log",
        exercise=True,
        crash=kill_an_agent_and_see_it_come_back,
        settings={
            "DEVICEDECK_LOG_FORMAT": "json",
            "DEVICEDECK_METRICS_PER_DEVICE": "true",
            "DEVICEDECK_DEVICE_LINK_TEMPLATE": LINK_TEMPLATE,
            "DEVICEDECK_WEBHOOK_URL": own_url,
            # The demo's own: ignored, and it says so.
            "DEVICEDECK_AUTH": "token",
        },
        during=look_around,
    )


def test_demo_shows_three_nodes_with_devices_and_pods_then_stops_on_sigint(
    first_run: Run, data_dir: Path
) -> None:
    assert first_run.exit_code == 0, first_run.output
    for node in TOPOLOGY:
        resources = first_run.nodes[node.name]["resources"]
        for plugin in node.plugins:
            # An unplugged device counts until the demo pulls it out.
            present = resources[plugin.resource]["devices"]
            assert present in (plugin.count, plugin.count - len(plugin.unplugged)), plugin
    # An API server, a webhook receiver, a service, a DRA driver, three sim-nodes and three
    # agents; all gone once the demo returned.
    assert len(first_run.children) == 4 + 2 * len(TOPOLOGY)
    assert still_running(first_run.children) == []
    assert "AUTHENTICATION IS OFF" in first_run.output
    assert "<html" in first_run.dashboard.lower()
    assert "demo stopped" in first_run.output
    # No socket is left behind for the next run to trip over.
    assert not list((data_dir / "kubelet").rglob("*.sock"))


def test_the_demo_runs_the_whole_cluster_path(first_run: Run, data_dir: Path) -> None:
    assert first_run.exit_code == 0, first_run.output
    # The startup message says how to reach the cluster with kubectl and curl.
    assert f"kubectl --kubeconfig {data_dir / 'kubeconfig'} get nodes" in first_run.output
    assert "curl --header" in first_run.output
    node = first_run.cluster["node"]
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == TOPOLOGY[0].name
    detail = first_run.cluster["detail"]
    manual = {r["resource"] for r in detail["manual_extended_resources"]}
    assert manual == {"example.com/dongle", "example.com/widget"}
    for plugin in TOPOLOGY[0].plugins:
        assert int(detail["capacity"][plugin.resource]) == plugin.count
        # Allocatable counts the healthy devices only (the workload flaps some).
        assert 0 <= int(detail["allocatable"][plugin.resource]) <= plugin.count
    # DRA next to device plugins: a held GPU, a broken one, a monitor watching all of them.
    dra = {d["device"]: d for d in first_run.cluster["dra"]}
    assert dra["gpu-0"]["allocated"] and dra["gpu-0"]["claims"][0]["consumers"]
    assert dra["gpu-1"]["health"]["health"] == "Unhealthy"
    # No pod or claim reports on gpu-3: its health comes from the driver's health stream.
    assert (dra["gpu-3"]["health"]["health"], dra["gpu-3"]["health"]["source"]) == (
        "Healthy",
        "kubelet_dra_health",
    )
    assert all(d["watched_by"] for d in dra.values())
    assert [n for n, d in sorted(dra.items()) if not d["allocated"]] == ["gpu-2", "gpu-3"]


def test_a_cordon_with_kubectl_shows_on_the_dashboard(first_run: Run) -> None:
    cordon = first_run.cluster["cordon"]
    assert "cordoned" in cordon["said"] or cordon["said"] == "patched 200"
    assert ">SchedulingDisabled</span>" in cordon["row"]
    assert '<dd class="mono" id="kube-status">Ready,SchedulingDisabled</dd>' in cordon["page"]
    assert cordon["api"]["unschedulable"] is True
    assert "node.kubernetes.io/unschedulable" in [t["key"] for t in cordon["api"]["taints"]]
    assert (cordon["after"]["status"], cordon["after"]["taints"]) == ("Ready", [])


def test_agents_write_as_their_service_account_bound_to_their_node(first_run: Run) -> None:
    # Each agent presents a token the simulated API server issued for its Pod; the service
    # checked it through TokenReview and credits the node's changes to that ServiceAccount.
    assert first_run.added_by == {
        n.name: f"system:serviceaccount:devicedeck-agent:devicedeck-agent@{n.name}"
        for n in TOPOLOGY
    }


def test_the_demo_tells_an_unplugged_device_from_an_unhealthy_one(first_run: Run) -> None:
    """On the untapped node one dongle fails and one is pulled out: the Node's status, kept
    by the simulated kubelet, has the service remove the one and keep the other Unhealthy."""
    faults = first_run.cluster["faults"]
    plugin = next(p for n in TOPOLOGY for p in n.plugins if p.unplugged)
    for device_id in plugin.unplugged:
        assert faults[device_id]["state"] == "removed"
        assert "Node's capacity" in faults[device_id]["health_detail"]
    for device_id in plugin.made_unhealthy:
        device = faults[device_id]
        assert (device["presence"], device["health"], device["health_source"]) == (
            "present",
            "Unhealthy",
            "derived",
        )
        assert "the Node's status counts" in device["health_detail"]


def test_second_run_continues_with_the_same_data(first_run: Run, data_dir: Path) -> None:
    second = run_demo_until_data(data_dir, data_dir.parent / "second.log")
    assert second.exit_code == 0, second.output
    assert "(continuing)" in second.output
    # Nothing asked for JSON this time: every line of every log is a text line.
    assert second.log_problems == []
    for node in TOPOLOGY:
        # The same node rows: first seen during the first run.
        assert second.nodes[node.name]["first_seen"] == first_run.nodes[node.name]["first_seen"]
    assert still_running(second.children) == []


def test_a_dead_agent_is_started_again_and_its_node_is_fresh_again(first_run: Run) -> None:
    assert first_run.exit_code == 0, first_run.output
    crash = first_run.crash
    assert crash["new"] != crash["old"]
    node = crash["node"]
    assert f"agent {node} stopped unexpectedly (killed by SIGKILL)" in crash["output"]
    assert "starting it again in 30 s" in crash["output"]
    assert f"agent {node} started again (pid {crash['new']})" in crash["output"]
    # The new agent was one of the demo's processes, and Ctrl-C ended it with the rest.
    assert crash["new"] in first_run.children
    assert still_running(first_run.children) == []


def test_ctrl_c_also_ends_a_process_waiting_to_start_again(first_run: Run, data_dir: Path) -> None:
    run = run_demo_until_data(
        data_dir, data_dir.parent / "third.log", crash=kill_an_agent_then_stop_the_demo
    )
    assert run.exit_code == 0, run.output
    node = run.crash["node"]
    assert f"agent {node} stopped unexpectedly (killed by SIGKILL)" in run.output
    assert "demo stopped" in run.output
    assert still_running(run.children) == []
    # Not started again, during the stop or after it.
    assert f"agent {node} started again" not in run.output
    assert agents_anywhere(node, data_dir) == []


def test_the_service_takes_the_settings_of_the_environment(
    first_run: Run, data_dir: Path, own_receiver: WebhookReceiver
) -> None:
    assert first_run.exit_code == 0, first_run.output
    # Named at start, values never shown (a webhook URL may carry a password).
    assert "DEVICEDECK_DEVICE_LINK_TEMPLATE" in first_run.output
    assert "ignored, as the demo sets them itself: DEVICEDECK_AUTH" in first_run.output
    seen = first_run.during
    assert "devicedeck_device_healthy{" in seen["service"]
    assert 'href="https://grafana.example/d/gpu?var-uuid=' in seen["device_page"]
    # The user's receiver got the same alerts as the demo's, with its credentials.
    mine = {(r.message["status"], r.alert["labels"]["alertname"]) for r in own_receiver.accepted()}
    assert ("firing", "DevicedeckNodeStale") in mine
    assert ("resolved", "DevicedeckNodeStale") in mine
    assert own_receiver.accepted()[0].headers["Authorization"].startswith("Basic ")
    for path in [*(data_dir / "logs").glob("*.log"), data_dir.parent / "first.log"]:
        assert HOOK_PASSWORD not in path.read_text(), path


def test_every_line_of_every_log_is_json_when_asked(first_run: Run) -> None:
    assert first_run.log_problems == []


def test_every_agent_serves_metrics_at_the_port_printed(first_run: Run) -> None:
    agents = first_run.during["agents"]
    assert set(agents) == {node.name for node in TOPOLOGY}
    for text in agents.values():
        assert "devicedeck_agent_snapshots_sent_total" in text


def test_the_readme_outage_fires_then_resolves_the_stale_alert(first_run: Run) -> None:
    """A stopped agent (pkill -STOP, as the README shows): the demo's receiver logs
    DevicedeckNodeStale firing, then resolved once the agent goes on."""
    outage = first_run.during["outage"]
    assert outage == {"node": OUTAGE_NODE, "alerts": ["firing", "resolved"]}
