"""`devicedeck demo`: the service on SQLite, three simulated nodes and their agents.

Everything lives in the data directory (database, the agents' tokens, kubelet roots, logs),
so running the demo again continues where it stopped. Authentication is off for the local
demo so the dashboard opens without a login; each agent still presents a real ingest token,
bound to its own node, exactly as they do against a production service.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import ipaddress
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TextIO

from devicedeck.demo.agent_credentials import AgentCredentials
from devicedeck.demo.processes import Children
from devicedeck.demo.topology import (
    AGENT_INTERVAL_SECONDS,
    DEMO_FAULT_SECONDS,
    DRA_NODE,
    TOPOLOGY,
    NodeSpec,
    agent_args,
    root_fits,
    sim_dra_driver_args,
    sim_node_args,
)
from devicedeck.sim.apiserver.server import url_host, write_kubeconfig
from devicedeck.sim.apiserver.store import Store

READY_TIMEOUT_SECONDS = 60.0
ADMIN_TOKEN_NAME = "demo-admin"
# The API server stops last: the service and the nodes talk to it until they are gone.
TIER_CLUSTER, TIER_SERVICE, TIER_NODES, TIER_AGENTS = 0, 1, 2, 3
# A dead node should show: the service calls a node stale after a few missed heartbeats, not
# the production 90 s.
AGENT_HEARTBEAT_SECONDS = 3.0
STALE_AFTER_SECONDS = 10.0
# A node's processes (its sim-node, its agent) that die wait this long before they are started
# again, so the dashboard shows the node stale meanwhile: the agent stops its heartbeat once
# its kubelet data is 3 intervals + 5 s old, the service calls the node stale STALE_AFTER
# later, and a few seconds of it stay visible.
NODE_RESTART_DELAY_SECONDS = (
    3 * AGENT_INTERVAL_SECONDS + 5 + AGENT_HEARTBEAT_SECONDS + STALE_AFTER_SECONDS + 6
)
# Ctrl-C, a polite kill, or the terminal closing: all stop the demo cleanly.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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

    def kubelet_root(self, node: NodeSpec) -> Path:
        return self.kubelet_dir / node.name


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _make_data_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DemoError(f"cannot use {path} as the data directory: {e.strerror or e}") from e


@contextlib.contextmanager
def _exclusive(lock_file: Path) -> Iterator[None]:
    with lock_file.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise DemoError(
                f"another demo is running with the data directory {lock_file.parent}; "
                "stop it first, or pass a different --data-dir"
            ) from e
        yield


def _check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise DemoError(f"port {port} on {host} is in use; pass --port") from e
            raise DemoError(f"cannot listen on {host}:{port}: {e.strerror}") from e


def _prepare_database(layout: DemoLayout) -> bool:
    """Migrate the SQLite database and make sure the admin token works; True if new.

    The agents need no token from the database: they present ServiceAccount tokens the
    simulated API server issues (`AgentCredentials`), which the service checks through
    TokenReview."""
    from devicedeck.db import create_db_engine, make_session_factory
    from devicedeck.demo.tokens import ensure_token_file
    from devicedeck.migrate import upgrade_to_head

    upgrade_to_head(layout.database_url)
    engine = create_db_engine(layout.database_url)
    try:
        factory = make_session_factory(engine)
        # With auth off visitors only read; the advertise form needs a signed-in admin.
        _, created = ensure_token_file(
            factory, layout.admin_token_file, ADMIN_TOKEN_NAME, ["read", "admin"]
        )
    finally:
        engine.dispose()
    return created


def _ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _child_env(layout: DemoLayout) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVICEDECK_")}
    env.update(
        DEVICEDECK_DATABASE_URL=layout.database_url,
        DEVICEDECK_AUTH="off",
        PYTHONUNBUFFERED="1",
    )
    return env


def advertise_command(cluster_url: str, node: str) -> str:
    """The curl command of the Kubernetes documentation's extended-resource procedure."""
    patch = '[{"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "4"}]'
    return (
        'curl --header "Content-Type: application/json-patch+json" \\\n'
        "  --request PATCH \\\n"
        f"  --data '{patch}' \\\n"
        f"  {cluster_url}/api/v1/nodes/{node}/status"
    )


def _free_loopback_port() -> int:
    # The API server binds it a moment later; another process taking it in between would
    # make the server exit, which the demo reports like any child failing.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def kubeconfig_server(path: Path) -> str:
    """The server URL of a kubeconfig's first cluster."""
    import yaml

    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    return str(config["clusters"][0]["cluster"]["server"])


def _cli_name() -> str:
    """How the user can run `devicedeck` from here: the entry point beside this Python."""
    script = Path(sys.executable).parent / "devicedeck"
    if not script.exists():
        return "devicedeck"
    with contextlib.suppress(ValueError):
        return str(script.relative_to(Path.cwd()))
    return str(script)


class Demo:
    def __init__(self, host: str, port: int, data_dir: Path, out: TextIO) -> None:
        self.host = host
        self.port = port
        self.layout = DemoLayout.for_data_dir(data_dir)
        self.out = out
        self.stop_requested = threading.Event()
        self.base_url = f"http://{url_host(host)}:{port}/"
        self.cluster_url = ""

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def run(self) -> int:
        layout = self.layout
        previous = {s: signal.signal(s, self._request_stop) for s in STOP_SIGNALS}
        try:
            _make_data_dir(layout.data_dir)
            with _exclusive(layout.lock_file):
                _check_port_free(self.host, self.port)
                fresh = _prepare_database(layout)
                self.say(
                    f"Devicedeck demo: data in {layout.data_dir}"
                    + (" (new)" if fresh else " (continuing)")
                )
                children = Children(_child_env(layout), cwd=layout.data_dir)
                try:
                    return self._supervise(children)
                finally:
                    self.say("stopping the agents, the simulated nodes and the service ...")
                    children.stop_all()
                    self.say("demo stopped; run it again to continue with the same data")
        except DemoError as e:
            self.say(f"devicedeck demo: {e}")
            return 1
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _request_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested.set()

    def _start_cluster(self, children: Children) -> str:
        """Start the simulated API server, and return its URL at once.

        The kubeconfig is written here, before the server runs (its admin token is read from,
        or created in, the server's state), so the service and the nodes start together with
        it rather than after it; they retry until it answers."""
        layout = self.layout
        try:
            token = Store(layout.cluster_dir).admin_token
        except (OSError, ValueError, KeyError) as e:
            raise DemoError(
                f"cannot use the cluster state in {layout.cluster_dir}: {e}; move it away to "
                "start the simulated cluster afresh"
            ) from e
        port = _free_loopback_port()
        url = f"http://127.0.0.1:{port}"
        write_kubeconfig(layout.kubeconfig, url, token)
        children.start(
            "sim-apiserver",
            [
                "sim-apiserver",
                "--port",
                str(port),
                "--data-dir",
                str(layout.cluster_dir),
                "--kubeconfig-out",
                str(layout.kubeconfig),
            ],
            layout.logs_dir / "sim-apiserver.log",
            TIER_CLUSTER,
        )
        return url

    def _supervise(self, children: Children) -> int:
        layout = self.layout
        if self.stop_requested.is_set():
            return 0
        self.cluster_url = self._start_cluster(children)
        credentials = AgentCredentials(
            layout.kubeconfig,
            [(node.name, layout.token_file(node.name)) for node in TOPOLOGY],
            threading.Event(),
        )
        credentials.start()
        try:
            return self._run_cluster(children, credentials)
        finally:
            credentials.stop.set()
            credentials.join(timeout=5)

    def _run_cluster(self, children: Children, credentials: AgentCredentials) -> int:
        layout = self.layout
        logs = layout.logs_dir
        children.start(
            "service",
            ["serve", "--host", self.host, "--port", str(self.port), "--no-migrate"],
            logs / "service.log",
            TIER_SERVICE,
            env={
                "DEVICEDECK_KUBE": "kubeconfig",
                "DEVICEDECK_KUBECONFIG": str(layout.kubeconfig),
                "DEVICEDECK_STALE_AFTER": f"{STALE_AFTER_SECONDS:g}",
            },
        )
        for node in TOPOLOGY:
            root = layout.kubelet_root(node)
            root.mkdir(parents=True, exist_ok=True)
            children.start(
                f"node {node.name}",
                sim_node_args(node, root, layout.kubeconfig),
                logs / f"node-{node.name}.log",
                TIER_NODES,
                restart_delay=NODE_RESTART_DELAY_SECONDS,
            )
        dra_node = next(n for n in TOPOLOGY if n.name == DRA_NODE)
        children.start(
            "sim-dra-driver",
            sim_dra_driver_args(layout.kubeconfig, layout.kubelet_root(dra_node)),
            logs / "sim-dra-driver.log",
            TIER_NODES,
        )
        # Agents start once the API server has issued their tokens; they retry until the
        # kubelet and the service answer, and their first snapshots then arrive as soon as the
        # service is ready.
        try:
            if not self._supervise_until(children, credentials.all_issued):
                return 0
        except TimeoutError as e:
            raise DemoError(
                f"the simulated API server issued no agent tokens in {READY_TIMEOUT_SECONDS:g} s; "
                f"see {logs / 'sim-apiserver.log'}"
            ) from e
        for node in TOPOLOGY:
            args = agent_args(
                node,
                layout.kubelet_root(node),
                self.base_url.rstrip("/"),
                layout.token_file(node.name),
            )
            args += ["--heartbeat", f"{AGENT_HEARTBEAT_SECONDS:g}"]
            children.start(
                f"agent {node.name}",
                args,
                logs / f"agent-{node.name}.log",
                TIER_AGENTS,
                restart_delay=NODE_RESTART_DELAY_SECONDS,
            )
        try:
            if not self._supervise_until(children, lambda: _ready(self.base_url)):
                return 0
        except TimeoutError as e:
            raise DemoError(
                f"the service did not become ready in {READY_TIMEOUT_SECONDS:g} s; "
                f"see {logs / 'service.log'}"
            ) from e
        self._banner()
        while not self.stop_requested.wait(0.25):
            children.supervise(self.say)
        return 0

    def _supervise_until(self, children: Children, done: Callable[[], bool]) -> bool:
        """Keeps the children running (starting again any that die) until done(): True then,
        False when a stop is requested first; TimeoutError after READY_TIMEOUT_SECONDS."""
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not done():
            if self.stop_requested.wait(0.1):
                return False
            children.supervise(self.say)
            if time.monotonic() > deadline:
                raise TimeoutError
        return True

    def _banner(self) -> None:
        layout = self.layout
        self.say()
        for node in TOPOLOGY:
            plugins = ", ".join(f"{p.count} x {p.resource}" for p in node.plugins)
            self.say(
                f"  node {node.name:<9} {plugins}   (kubelet root {layout.kubelet_root(node)})"
            )
            for plugin in node.plugins:
                faults = [f"{d} fails" for d in plugin.made_unhealthy]
                faults += [f"{d} is unplugged" for d in plugin.unplugged]
                if faults:
                    self.say(
                        f"    {plugin.resource} health is derived from the kubelet: after "
                        f"{DEMO_FAULT_SECONDS:g} s {' and '.join(faults)}; the Node's status "
                        "tells which is which"
                    )
        if layout.kubelet_dir.parent != layout.data_dir:
            self.say(
                f"  (kubelet roots are in {layout.kubelet_dir}, as unix socket paths "
                "must stay under 108 bytes)"
            )
        self.say(f"  logs: {layout.logs_dir}   agent tokens: {layout.data_dir / 'tokens'}")
        self.say(
            f"  To change things from the dashboard (advertise a resource), sign in with the "
            f"admin token in {layout.admin_token_file}"
        )
        self.say()
        self.say(f"  Cluster: a simulated API server at {self.cluster_url}")
        self.say(f"    kubectl --kubeconfig {layout.kubeconfig} get nodes")
        self.say(
            "    Advertise an extended resource by hand, as the Kubernetes documentation does:"
        )
        for line in advertise_command(self.cluster_url, TOPOLOGY[0].name).splitlines():
            self.say(f"    {line}")
        self.say()
        if _is_loopback(self.host):
            reach = f"  !! {url_host(self.host)}:{self.port} on this machine"
        else:
            reach = f"  !! port {self.port} of {self.host} FROM YOUR NETWORK"
        self.say("  !! AUTHENTICATION IS OFF for this local demo: anyone who can reach")
        self.say(f"{reach} can read the inventory. Run")
        self.say(
            "  !! `devicedeck serve` (DEVICEDECK_AUTH=token is the default) for anything else."
        )
        self.say()
        first = layout.kubelet_root(TOPOLOGY[0])
        self.say(
            f"  Try: {_cli_name()} sim-ctl --root {first} pod create demo/my-job "
            "--request nvidia.com/gpu=2"
        )
        self.say()
        self.say(f"Dashboard: {self.base_url}")
        self.say(f"API:       {self.base_url}api/v1/nodes   (OpenAPI docs at {self.base_url}docs)")
        self.say("Press Ctrl-C to stop.")
