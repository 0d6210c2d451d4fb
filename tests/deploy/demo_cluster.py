"""The cluster side of the demo as the README shows it: the documentation's curl patch against
the simulated API server, the dashboard's advertise form, kubectl's view, the DRA driver's
devices, and the scripted faults the service tells apart."""

from __future__ import annotations

import http.cookiejar
import json
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from devicedeck.demo.layout import advertise_command, kubeconfig_server
from devicedeck.demo.topology import DRA_DEVICES, DRA_NODE, TOPOLOGY

from .helpers import wait_until

# Deadlines for outcomes, generous so a busy machine passes; the demo's speed is not tested.
DATA_TIMEOUT = 120.0


def get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return json.load(response)


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
        states = {d: (found[d]["presence"], found[d]["health"]) for d in found}
        return all(
            states.get(d, ("",))[0] == "removed" for p in wanted.values() for d in p.unplugged
        ) and all(
            states.get(d) == ("present", "Unhealthy")
            for p in wanted.values()
            for d in p.made_unhealthy
        )

    # The faults come DEMO_FAULT_SECONDS and DEMO_UNPLUG_SECONDS after the nodes start.
    wait_until(told_apart, DATA_TIMEOUT + 60, f"the demo's device faults told apart: {found}")
    return found
