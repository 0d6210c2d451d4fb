"""`devicedeck demo` as a user runs it: a real process tree, stopped with Ctrl-C (SIGINT),
started again on the same data directory."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devicedeck.demo.runner import advertise_command, kubeconfig_server
from devicedeck.demo.topology import DRA_DEVICES, DRA_NODE, TOPOLOGY

from .helpers import REPO, wait_for_dashboard, wait_until

pytestmark = pytest.mark.slow

STARTUP_TIMEOUT = 180.0
# Deadlines for outcomes, generous so a busy machine passes; the demo's speed is not tested.
DATA_TIMEOUT = 120.0
STOP_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return json.load(response)


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


def kill_an_agent_and_see_it_come_back(port: int, demo_pid: int, log: Path) -> dict[str, Any]:
    """SIGKILL one node's agent: the node turns stale, the demo starts the agent again, and
    the node is fresh again."""
    node = TOPOLOGY[1].name
    wait_until(lambda: not node_stale(port, node), DATA_TIMEOUT, f"{node} fresh at first")
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
    return {"node": node, "old": old, "new": new[0], "output": log.read_text()}


def kill_an_agent_then_stop_the_demo(port: int, demo_pid: int, log: Path) -> dict[str, Any]:
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


def node_page(port: int, node: str, opener: urllib.request.OpenerDirector | None = None) -> str:
    url = f"http://127.0.0.1:{port}/nodes/{node}"
    with (opener or urllib.request.build_opener()).open(url, timeout=5) as response:
        return str(response.read().decode())


def advertised_by_hand(page: str) -> str:
    """The "Advertised by hand" card of a node page."""
    start = page.index('id="manual-title"')
    return page[start : page.index("</section>", start)]


def exercise_the_cluster(port: int, data_dir: Path) -> dict[str, Any]:
    """What the README shows: the documentation's curl patch against the demo's API server,
    which the node page then lists; the dashboard's own advertise form; kubectl's view."""
    kubeconfig = data_dir / "kubeconfig"
    server = kubeconfig_server(kubeconfig)
    node = TOPOLOGY[0].name
    curl = subprocess.run(
        ["bash", "-c", advertise_command(server, node)], capture_output=True, text=True, timeout=30
    )
    assert curl.returncode == 0, curl.stderr
    assert json.loads(curl.stdout)["status"]["capacity"]["example.com/dongle"] == "4"
    wait_until(
        lambda: "example.com/dongle" in advertised_by_hand(node_page(port, node)),
        DATA_TIMEOUT,
        "the curl-advertised resource on the node page",
    )
    # The dashboard's form, after signing in with the admin token the demo printed (with auth
    # off a visitor only reads): the page's CSRF cookie and token, sent from the page's origin.
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    origin = {"Origin": f"http://127.0.0.1:{port}"}
    with opener.open(f"http://127.0.0.1:{port}/login", timeout=5) as response:
        login_csrf = re.search(r'name="csrf_token" value="([^"]+)"', response.read().decode())
    assert login_csrf is not None
    admin_token = (data_dir / "admin.token").read_text().strip()
    sign_in = urllib.parse.urlencode(
        {"csrf_token": login_csrf.group(1), "token": admin_token, "next": f"/nodes/{node}"}
    ).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/login", data=sign_in, headers=origin)
    with opener.open(request, timeout=10) as response:
        assert response.status == 200  # the node page, signed in
    token = re.search(r'name="csrf_token" value="([^"]+)"', node_page(port, node, opener))
    assert token is not None
    form = urllib.parse.urlencode(
        {
            "csrf_token": token.group(1),
            "action": "set",
            "resource": "example.com/widget",
            "quantity": "2",
        }
    ).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/nodes/{node}/extended-resources",
        data=form,
        headers={"Origin": f"http://127.0.0.1:{port}"},
    )
    with opener.open(request, timeout=10) as response:
        assert response.status == 200  # after the redirect back to the node page
    with urllib.request.urlopen(f"{server}/api/v1/nodes/{node}", timeout=5) as response:
        cluster_node = json.load(response)
    assert cluster_node["status"]["capacity"]["example.com/widget"] == "2"
    wait_until(
        lambda: "example.com/widget" in advertised_by_hand(node_page(port, node)),
        DATA_TIMEOUT,
        "the form-advertised resource on the node page",
    )
    # Device-plugin resources come from the sim-kubelets through the API server.
    gpu = TOPOLOGY[0].plugins[0]
    wait_until(
        lambda: (
            (detail := get(port, f"/api/v1/nodes/{node}"))["kube_synced_at"]
            and detail["capacity"].get(gpu.resource) == str(gpu.count)
        ),
        DATA_TIMEOUT,
        "the node's capacity from the API server",
    )
    # An unhealthy device lowers allocatable, not capacity, as the kubelet reports it.
    root = data_dir / "kubelet" / node
    command = ["sim-ctl", "--root", str(root), "device", "health", gpu.resource, "#0", "Unhealthy"]
    ctl = subprocess.run(
        [sys.executable, "-m", "devicedeck.cli", *command],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ctl.returncode == 0, ctl.stderr

    def lowered() -> bool:
        with urllib.request.urlopen(f"{server}/api/v1/nodes/{node}", timeout=5) as response:
            status = json.load(response)["status"]
        detail = get(port, f"/api/v1/nodes/{node}")
        return (
            status["capacity"][gpu.resource] == str(gpu.count)
            and int(status["allocatable"][gpu.resource]) < gpu.count
            and detail["capacity"][gpu.resource] == str(gpu.count)
            and detail["allocatable"][gpu.resource] == status["allocatable"][gpu.resource]
        )

    wait_until(lowered, DATA_TIMEOUT, "allocatable below capacity after a device turned unhealthy")
    detail = get(port, f"/api/v1/nodes/{node}")
    # The simulated DRA driver's GPUs, with the claims and health it wrote, through the watcher,
    # and the health of every one from its health stream, through the node's agent.
    dra: list[dict[str, Any]] = []

    def dra_shows() -> bool:
        dra[:] = get(port, f"/api/v1/dra/devices?node={DRA_NODE}")["results"]
        return (
            len(dra) == DRA_DEVICES
            and all(d["health"] for d in dra)
            and any(d["health"]["source"] == "kubelet_dra_health" for d in dra)
        )

    wait_until(dra_shows, DATA_TIMEOUT, "the simulated DRA driver's devices")
    return {
        "node": cluster_node,
        "detail": detail,
        "dra": dra,
        "faults": scripted_faults(port),
        "cordon": cordon_and_uncordon(port, kubeconfig, node),
    }


def nodes_row(port: int, node: str) -> str:
    """The row of `node` in the dashboard's nodes list."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/nodes", timeout=5) as response:
        page = response.read().decode()
    start = page.index(f'href="/nodes/{node}"')
    return str(page[start : page.index("</tr>", start)])


def set_unschedulable(kubeconfig: Path, node: str, cordoned: bool) -> str:
    """`kubectl cordon` (or uncordon) against the demo's API server; without kubectl, the
    JSON patch it amounts to."""
    kubectl = shutil.which("kubectl")
    if kubectl is not None:
        verb = "cordon" if cordoned else "uncordon"
        done = subprocess.run(
            [kubectl, "--kubeconfig", str(kubeconfig), verb, node],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout
    patch = [{"op": "add", "path": "/spec/unschedulable", "value": cordoned}]
    request = urllib.request.Request(
        f"{kubeconfig_server(kubeconfig)}/api/v1/nodes/{node}",
        data=json.dumps(patch).encode(),
        method="PATCH",
        headers={"Content-Type": "application/json-patch+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return f"patched {response.status}"


def cordon_and_uncordon(port: int, kubeconfig: Path, node: str) -> dict[str, Any]:
    """A cordon shows on the nodes list, the node page and the API; an uncordon clears it."""
    said = set_unschedulable(kubeconfig, node, True)
    wait_until(
        lambda: "SchedulingDisabled" in nodes_row(port, node),
        DATA_TIMEOUT,
        "the cordoned node on the nodes list",
    )
    cordoned = {
        "said": said,
        "row": nodes_row(port, node),
        "page": node_page(port, node),
        "api": get(port, f"/api/v1/nodes/{node}")["kubernetes"],
    }
    set_unschedulable(kubeconfig, node, False)
    wait_until(
        lambda: "SchedulingDisabled" not in nodes_row(port, node),
        DATA_TIMEOUT,
        "the uncordoned node on the nodes list",
    )
    return cordoned | {"after": get(port, f"/api/v1/nodes/{node}")["kubernetes"]}


def scripted_faults(port: int) -> dict[str, dict[str, Any]]:
    """The devices the demo fails and unplugs on its untapped node, once the service has told
    them apart, by device ID."""
    wanted = {
        (node.name, plugin.resource): plugin
        for node in TOPOLOGY
        for plugin in node.plugins
        if plugin.unplugged or plugin.made_unhealthy
    }
    found: dict[str, dict[str, Any]] = {}

    def told_apart() -> bool:
        found.clear()
        for (node, resource), plugin in wanted.items():
            query = urllib.parse.urlencode({"node": node, "resource": resource, "state": "any"})
            for device in get(port, f"/api/v1/devices?{query}")["results"]:
                if device["device_id"] in plugin.unplugged + plugin.made_unhealthy:
                    found[device["device_id"]] = device
        states = {d: (found[d]["state"], found[d]["health"]) for d in found}
        return all(
            states.get(d, ("",))[0] == "removed" for p in wanted.values() for d in p.unplugged
        ) and all(
            states.get(d) == ("present", "Unhealthy")
            for p in wanted.values()
            for d in p.made_unhealthy
        )

    # The faults come DEMO_FAULT_SECONDS after the nodes start.
    wait_until(told_apart, DATA_TIMEOUT + 60, f"the demo's device faults told apart: {found}")
    return found


def run_demo_until_data(
    data_dir: Path,
    log: Path,
    exercise: bool = False,
    program: Sequence[str] = (sys.executable, "-m", "devicedeck.cli"),
    cwd: Path = REPO,
    crash: Callable[[int, int, Path], dict[str, Any]] | None = None,
) -> Run:
    """Start the demo, wait for nodes with devices and pods, exercise it and crash a part of
    it if asked, Ctrl-C it, wait for the end."""
    port = free_port()
    command = [*program, "demo", "--port", str(port)]
    command += ["--data-dir", str(data_dir)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVICEDECK_")}
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
            crashed = crash(port, demo.pid, log) if crash is not None else {}
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
    return Run(log.read_text(), code, nodes, children, dashboard, cluster, added_by, crashed)


@pytest.fixture(scope="module")
def data_dir() -> Iterator[Path]:
    # Short on purpose: the kubelet roots live inside it (unix socket path limit).
    base = Path(tempfile.mkdtemp(prefix="dd", dir="/tmp"))
    try:
        yield base / "data"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def first_run(data_dir: Path) -> Run:
    return run_demo_until_data(
        data_dir,
        data_dir.parent / "first.log",
        exercise=True,
        crash=kill_an_agent_and_see_it_come_back,
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
    # An API server, a service, a DRA driver, three sim-nodes and three agents; all gone once
    # the demo returned.
    assert len(first_run.children) == 3 + 2 * len(TOPOLOGY)
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
        assert (device["state"], device["health"], device["health_source"]) == (
            "present",
            "Unhealthy",
            "derived",
        )
        assert "the Node's status counts" in device["health_detail"]


def test_second_run_continues_with_the_same_data(first_run: Run, data_dir: Path) -> None:
    second = run_demo_until_data(data_dir, data_dir.parent / "second.log")
    assert second.exit_code == 0, second.output
    assert "(continuing)" in second.output
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
