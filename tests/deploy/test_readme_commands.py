"""The shell commands README.md and docs/*.md give a reader, run as written, in order, against
a fresh demo started with `make run` in a temporary directory laid out like a checkout.

A fenced shell block is run when the line before its fence is `<!-- runnable: NAME -->`;
CHECKS[NAME] holds what the text around the block says it produces. Every other shell block
is listed in NOT_RUNNABLE with the reason, so a new block cannot go unnoticed. The one change
made to a command: the demo's service listens on a port the OS chose, so `127.0.0.1:8000` and
`localhost:8000` become the service's address. The simulated API server's address, which
changes on every start, is read by the commands themselves from the file the demo writes. A
block that needs a tool this machine lacks (kubectl is not packaged everywhere) is skipped,
saying so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devicedeck.demo.layout import kubeconfig_server
from devicedeck.demo.topology import TOPOLOGY

from .helpers import REPO, wait_for_dashboard, wait_until

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_INFO = {"sh", "bash", "shell", "console"}
MARKER = re.compile(r"^\s*<!--\s*runnable:\s*([\w-]+)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
SERVICE_ADDRESSES = ("127.0.0.1:8000", "localhost:8000")
TOOLS = ("kubectl", "curl")

STARTUP_TIMEOUT = 180.0
# Generous: the demo's agents report every 2 s, but the machine may be busy.
OUTCOME_TIMEOUT = 60.0
COMMAND_TIMEOUT = 120.0


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    info: str
    text: str
    name: str | None  # set when the block is marked runnable

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")


def fenced_blocks(document: Path) -> list[Block]:
    """Every fenced code block, with the runnable marker on the line before it, if any."""
    blocks: list[Block] = []
    lines = document.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence, info = opening.groups()
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            line = lines[end]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            end += 1
        marker = MARKER.match(lines[index - 1]) if index else None
        name = marker.group(1) if marker else None
        blocks.append(Block(document, index + 1, info, "\n".join(body) + "\n", name))
        index = end + 1
    return blocks


def shell_blocks() -> list[Block]:
    return [b for d in DOCUMENTS for b in fenced_blocks(d) if b.info in SHELL_INFO or b.name]


# --- the demo and the commands ----------------------------------------------------------


@dataclass
class Ran:
    block: Block
    command: str
    exit_code: int
    stdout: str
    stderr: str


class Demo:
    """A demo started as `make run` starts it, in a directory that looks like a checkout."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir = workdir
        self.url = f"http://127.0.0.1:{port}"

    @property
    def apiserver(self) -> str:
        """The demo's simulated API server, as its kubeconfig names it."""
        return kubeconfig_server(self.workdir / "devicedeck-data" / "kubeconfig")

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.load(response)

    def get_text(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return str(response.read().decode())

    def run(self, block: Block) -> Ran:
        command = block.text
        for address in SERVICE_ADDRESSES:
            command = command.replace(address, self.url.removeprefix("http://"))
        result = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", command],
            cwd=self.workdir,
            env=reader_environment(),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
        return Ran(block, command, result.returncode, result.stdout, result.stderr)


def reader_environment() -> dict[str, str]:
    """A reader's shell: no Devicedeck settings, no virtualenv on PATH, not inside a make."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVICEDECK_", "MAKE"))}
    env.pop("MFLAGS", None)
    env.pop("VIRTUAL_ENV", None)
    path = [p for p in env.get("PATH", "").split(":") if p and "/.venv/" not in p + "/"]
    env["PATH"] = ":".join(path)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def checkout_copy(workdir: Path) -> None:
    """The checkout's files, linked; the demo's data directory will be the workdir's own."""
    for entry in REPO.iterdir():
        if entry.name in (".git", "devicedeck-data") or entry.name.endswith(".db"):
            continue
        (workdir / entry.name).symlink_to(entry)


def demo_is_busy(demo: Demo) -> bool:
    """What a reader sees before trying anything: every node's devices, and pods holding some
    of them on every node (the workload runs from the start)."""
    nodes = {n["name"]: n for n in demo.get("/api/v1/nodes")["results"]}
    return all(
        node.name in nodes
        and all(
            nodes[node.name]["resources"].get(p.resource, {}).get("devices") for p in node.plugins
        )
        and sum(r["allocated"] for r in nodes[node.name]["resources"].values()) > 0
        for node in TOPOLOGY
    )


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    # Short on purpose: the kubelet roots live in the data directory (unix socket path limit).
    workdir = Path(tempfile.mkdtemp(prefix="dd", dir="/tmp"))
    checkout_copy(workdir)
    port = free_port()
    log = workdir / "demo.log"
    # The README's `make run PORT=...`. The virtualenv is the suite's own: a test must not
    # reinstall it, so make is told to take its stamp as it is.
    command = ["make", "--no-print-directory", "-o", ".venv/.runtime", "run", f"PORT={port}"]
    with (
        log.open("w") as out,
        subprocess.Popen(
            command,
            cwd=workdir,
            env=reader_environment(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ) as process,
    ):
        running = Demo(workdir, port)
        try:
            wait_for_dashboard(process, log, running.url, STARTUP_TIMEOUT)
            wait_until(
                lambda: demo_is_busy(running), STARTUP_TIMEOUT, "devices and pods on every node"
            )
            yield running
        finally:
            if process.poll() is None:
                # Ctrl-C: the whole foreground process group, make and the demo, hears it.
                os.killpg(process.pid, signal.SIGINT)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            shutil.rmtree(workdir, ignore_errors=True)


# --- what each runnable block is said to produce -----------------------------------------


def eventually(condition: Callable[[], bool], what: str) -> None:
    wait_until(condition, OUTCOME_TIMEOUT, what)


def admitted_devices(stdout: str, resource: str) -> list[str]:
    """Device IDs sim-ctl names for a resource (`  main: RES NUMA 0: a,b; NUMA 1: c`)."""
    found: list[str] = []
    for line in stdout.splitlines():
        _, _, rest = line.partition(f": {resource} ")
        for group in rest.split("; ") if rest else []:
            found += group.partition(": ")[2].split(",")
    return found


def check_try_a_pod(ran: Ran, demo: Demo) -> None:
    """README "The demo": the pod is admitted with two of gpu-a's GPUs, and shows up in the
    service (the Pods page, /api/v1/pods) within seconds."""
    assert ran.stdout.startswith("pod demo/my-job admitted"), ran.stdout
    gpus = admitted_devices(ran.stdout, "nvidia.com/gpu")
    assert len(gpus) == 2, ran.stdout
    pod: dict[str, Any] = {}

    def shown() -> bool:
        try:
            pod.update(demo.get("/api/v1/pods/demo/my-job"))
        except urllib.error.HTTPError:
            return False
        return bool(pod["containers"])

    eventually(shown, "demo/my-job in the service")
    devices = [d for c in pod["containers"] for d in c["devices"]]
    assert pod["node"] == "gpu-a"
    assert sorted((d["resource"], d["device_id"]) for d in devices) == sorted(
        ("nvidia.com/gpu", gpu) for gpu in gpus
    )
    page = demo.get_text("/pods")
    assert "my-job" in page


def check_cluster_kubectl(ran: Ran, demo: Demo) -> None:
    """README "The demo's cluster": kubectl lists the three nodes, and the Pod objects of
    gpu-a's pods, the one created by hand above among them."""
    nodes = {line.split()[0] for line in ran.stdout.splitlines()[1:] if line.strip()}
    assert {n.name for n in TOPOLOGY} <= nodes, ran.stdout
    pods = {tuple(line.split()[:2]) for line in ran.stdout.splitlines() if line.strip()}
    assert ("demo", "my-job") in pods, ran.stdout


def check_cluster_kubectl_tour(ran: Ran, demo: Demo) -> None:
    """README "The demo's cluster": describe shows the node's lease and its kubelet's events,
    explain reads the field's description, can-i says yes, and the manifests apply as a
    server dry run, nothing stored. (kubectl warns that the demo's devicedeck-agent namespace,
    made by the agents' pods, was not made by `kubectl apply`; it errs nowhere.)"""
    assert "error" not in ran.stderr.lower(), ran.stderr
    assert "HolderIdentity:  gpu-a" in ran.stdout
    assert re.search(r"Normal\s+NodeReady\s", ran.stdout), ran.stdout
    assert "FIELD: unschedulable <boolean>" in ran.stdout
    assert "\nyes\n" in ran.stdout
    dry_run = [line for line in ran.stdout.splitlines() if line.endswith("(server dry run)")]
    assert "deployment.apps/devicedeck created (server dry run)" in dry_run
    with urllib.request.urlopen(f"{demo.apiserver}/api/v1/namespaces", timeout=10) as response:
        names = {n["metadata"]["name"] for n in json.load(response)["items"]}
    assert "devicedeck" not in names


def gpu_a_row(demo: Demo) -> str:
    page = demo.get_text("/nodes")
    start = page.index('href="/nodes/gpu-a"')
    return page[start : page.index("</tr>", start)]


def check_cluster_cordon(ran: Ran, demo: Demo) -> None:
    """README "The demo's cluster": within seconds the nodes list shows gpu-a
    SchedulingDisabled, and the API its kubernetes state."""
    assert ran.stdout.strip() == "node/gpu-a cordoned", ran.stdout
    eventually(lambda: "SchedulingDisabled" in gpu_a_row(demo), "gpu-a cordoned on /nodes")
    state = demo.get("/api/v1/nodes/gpu-a")["kubernetes"]
    assert state["unschedulable"] is True and state["status"] == "Ready,SchedulingDisabled"
    assert "node.kubernetes.io/unschedulable" in [t["key"] for t in state["taints"]]


def check_cluster_uncordon(ran: Ran, demo: Demo) -> None:
    assert ran.stdout.strip() == "node/gpu-a uncordoned", ran.stdout
    eventually(lambda: "SchedulingDisabled" not in gpu_a_row(demo), "gpu-a open on /nodes")


def check_advertise_by_hand(ran: Ran, demo: Demo) -> None:
    """README "The demo's cluster": the answer is the updated Node; the service lists the
    resource as advertised by hand at once, and allocatable follows when the kubelet next
    writes its status."""
    # Sent to the API server the demo started, at the URL it wrote, not to the dashboard.
    assert demo.apiserver.removeprefix("http://") not in ran.command
    url_file = demo.workdir / "devicedeck-data" / "apiserver-url"
    assert url_file.read_text().strip() == demo.apiserver
    node = json.loads(ran.stdout)
    assert node["kind"] == "Node" and node["metadata"]["name"] == "gpu-a"
    assert node["status"]["capacity"]["example.com/dongle"] == "4"
    detail: dict[str, Any] = {}

    def advertised() -> bool:
        detail.update(demo.get("/api/v1/nodes/gpu-a"))
        manual = {r["resource"]: r for r in detail["manual_extended_resources"]}
        return "example.com/dongle" in manual

    eventually(advertised, "example.com/dongle advertised by hand on gpu-a")
    eventually(
        lambda: demo.get("/api/v1/nodes/gpu-a")["allocatable"].get("example.com/dongle") == "4",
        "gpu-a's kubelet copying the capacity into allocatable",
    )


def check_ingest_by_hand(ran: Ran, demo: Demo) -> None:
    """README "Ingest rules": the answer says what changed; sent again it changes nothing;
    GET /api/v1/devices?health=Unhealthy lists dongle-1."""
    answer = json.loads(ran.stdout)
    assert "changed" in answer, answer
    assert answer["changed"] is True and answer["added"] == 2 and answer["events"] == 3, answer
    again = demo.run(ran.block)
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["changed"] is False
    unhealthy = demo.get("/api/v1/devices?health=Unhealthy&node=gpu-node-1")["results"]
    assert [d["device_id"] for d in unhealthy] == ["dongle-1"]


def check_costly_devices(ran: Ran, demo: Demo) -> None:
    """README "API overview": the devices that cost the most jobs this week, most pods hit
    first, each with its figures and the pods' names. The demo's workload makes devices
    fail from the start, so there is something to rank."""
    answer = json.loads(ran.stdout)
    results = answer["results"]
    assert results, answer
    hits = [r["pods_hit"] for r in results]
    assert hits == sorted(hits, reverse=True), hits
    assert all(len(r["pods_hit_names"]) == r["pods_hit"] for r in results), results
    assert all(r["failures"] or r["removals"] for r in results), results


def check_failing_nodes(ran: Ran, demo: Demo) -> None:
    """docs/reliability.md: per node as CSV, most failures first."""
    lines = ran.stdout.strip().splitlines()
    assert lines[0] == "node,devices,failures,unhealthy_seconds,removals,pods_hit", lines
    failures = [int(line.split(",")[2]) for line in lines[1:]]
    assert failures and failures == sorted(failures, reverse=True), lines


CHECKS: dict[str, Callable[[Ran, Demo], None]] = {
    "try-a-pod": check_try_a_pod,
    "cluster-kubectl": check_cluster_kubectl,
    "cluster-kubectl-tour": check_cluster_kubectl_tour,
    "cluster-cordon": check_cluster_cordon,
    "cluster-uncordon": check_cluster_uncordon,
    "advertise-by-hand": check_advertise_by_hand,
    "ingest-by-hand": check_ingest_by_hand,
    "costly-devices": check_costly_devices,
    "failing-nodes": check_failing_nodes,
}

# How the first line of a shell block that is not run begins -> why it is not run.
NOT_RUNNABLE: dict[str, str] = {
    "make run": "starts the demo on port 8000; this test starts it first as `make run PORT=...` "
    "with a port the OS chose (and `make test`, beside it, runs this suite)",
    "pip install .": "installs the package; tests/deploy/test_packaging.py installs the wheel in "
    "a fresh virtualenv and runs these commands from another directory",
    "docker compose": "needs Docker",
    "docker build": "needs Docker and a registry",
    "kubectl apply -f deploy/kubernetes": "needs a real cluster",
    "kubectl apply -k deploy/kubernetes": "needs a real cluster",
    "kubectl -n devicedeck": "needs a real cluster",
    ".venv/bin/devicedeck truth": "runs its own cluster for many minutes; tests/truth/test_run.py "
    "runs a short seeded run",
    "PYTHONPATH=<worktree> .venv/bin/python -m devicedeck.cli truth": "the oracle's long run "
    "from a worktree of a past commit, kept as a record",
    "DEVICEDECK_REQUIRE_POSTGRES=1 .venv/bin/pytest": "a test of this suite run on its own; "
    "`make test` runs it with the rest",
}


def not_runnable_because(block: Block) -> str | None:
    return next(
        (why for start, why in NOT_RUNNABLE.items() if block.first_line.startswith(start)), None
    )


def test_every_shell_block_is_run_or_says_why_not() -> None:
    blocks = shell_blocks()
    unexplained = [
        f"{b.where}: {b.first_line}" for b in blocks if not b.name and not not_runnable_because(b)
    ]
    assert not unexplained, "mark these runnable or list them in NOT_RUNNABLE:\n" + "\n".join(
        unexplained
    )
    names = [b.name for b in blocks if b.name]
    assert len(names) == len(set(names)), f"two blocks with one name: {names}"
    assert set(names) == set(CHECKS), "every runnable block, and only those, has a check"
    unused = [
        start
        for start in NOT_RUNNABLE
        if not any(b.first_line.startswith(start) for b in blocks if not b.name)
    ]
    assert not unused, f"NOT_RUNNABLE lists blocks no longer in the docs: {unused}"


def runnable_blocks() -> list[Block]:
    return [b for b in shell_blocks() if b.name]


@pytest.mark.slow
# The first case also starts the demo (STARTUP_TIMEOUT twice, on a busy machine).
@pytest.mark.timeout(2 * STARTUP_TIMEOUT + OUTCOME_TIMEOUT + COMMAND_TIMEOUT)
@pytest.mark.parametrize("block", runnable_blocks(), ids=lambda b: str(b.name))
def test_runnable_commands_work_as_written_on_a_fresh_demo(block: Block, demo: Demo) -> None:
    """One case per block, in document order, all on one demo: later blocks may build on what
    earlier ones did, as they do for a reader."""
    missing = [t for t in TOOLS if re.search(rf"\b{t}\b", block.text) and not shutil.which(t)]
    if missing:
        pytest.skip(f"{block.where} needs {', '.join(missing)}, which is not installed")
    ran = demo.run(block)
    assert ran.exit_code == 0, (
        f"{block.where} ({block.name}): exit {ran.exit_code}\n{ran.stdout}\n{ran.stderr}"
    )
    CHECKS[str(block.name)](ran, demo)
