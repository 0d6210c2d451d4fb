"""`devicedeck demo`: the service on SQLite, three simulated nodes and their agents.

Everything lives in the data directory (database, the agents' tokens, kubelet roots, logs),
so running the demo again continues where it stopped. Authentication is off for the local
demo so the dashboard opens without a login; each agent still presents a real ingest token,
bound to its own node, exactly as they do against a production service. The service takes
the DEVICEDECK_ settings of the environment (devicedeck/demo/environment.py) and sends its
webhooks to the demo's receiver, whose log shows each alert.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import TextIO

from devicedeck.demo.agent_credentials import AgentCredentials
from devicedeck.demo.banner import banner
from devicedeck.demo.environment import (
    base_env,
    check_service_settings,
    log_format,
    service_env,
    service_settings,
)
from devicedeck.demo.layout import (
    DemoError,
    DemoLayout,
    check_port_free,
    exclusive,
    free_port,
    make_data_dir,
)
from devicedeck.demo.processes import Children
from devicedeck.demo.topology import (
    AGENT_INTERVAL_SECONDS,
    DRA_NODE,
    TOPOLOGY,
    agent_args,
    sim_dra_driver_args,
    sim_node_args,
)
from devicedeck.sim.apiserver.server import url_host, write_kubeconfig
from devicedeck.sim.apiserver.store import Store

READY_TIMEOUT_SECONDS = 60.0
ADMIN_TOKEN_NAME = "demo-admin"
# The API server and the webhook receiver stop last: the others talk to them until they are
# gone.
TIER_CLUSTER, TIER_SERVICE, TIER_NODES, TIER_AGENTS = 0, 1, 2, 3
# A dead node should show: the service calls a node stale after a few missed heartbeats, not
# the production 90 s.
AGENT_HEARTBEAT_SECONDS = 3.0


def node_restart_delay(stale_after: float) -> float:
    """How long a node's processes (its sim-node, its agent) that die wait before they are
    started again, so the dashboard shows the node stale meanwhile, and the stale alert fires:
    the agent stops its heartbeat once its kubelet data is 3 intervals + 5 s old, the service
    calls the node stale `stale_after` later, and a few seconds of it stay visible."""
    return 3 * AGENT_INTERVAL_SECONDS + 5 + AGENT_HEARTBEAT_SECONDS + stale_after + 6


# Ctrl-C, a polite kill, or the terminal closing: all stop the demo cleanly.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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


class Demo:
    def __init__(
        self,
        host: str,
        port: int,
        data_dir: Path,
        out: TextIO,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.layout = DemoLayout.for_data_dir(data_dir)
        self.out = out
        self.environ = dict(os.environ if environ is None else environ)
        self.stop_requested = threading.Event()
        self.base_url = f"http://{url_host(host)}:{port}/"
        self.cluster_url = ""
        # Each agent's /metrics port, chosen at start and kept when it is started again.
        self.metrics_ports = {node.name: 0 for node in TOPOLOGY}

    @property
    def server(self) -> str:
        """The service's URL as the agents are given it (and as their command lines show)."""
        return self.base_url.rstrip("/")

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def run(self) -> int:
        layout = self.layout
        previous = {s: signal.signal(s, self._request_stop) for s in STOP_SIGNALS}
        try:
            make_data_dir(layout.data_dir)
            with exclusive(layout.lock_file):
                check_port_free(self.host, self.port)
                receiver_port = free_port()
                settings = service_settings(
                    self.environ, layout, f"http://127.0.0.1:{receiver_port}/"
                )
                check_service_settings(settings)
                fresh = _prepare_database(layout)
                self.say(
                    f"Devicedeck demo: data in {layout.data_dir}"
                    + (" (new)" if fresh else " (continuing)")
                )
                children = Children(
                    base_env(self.environ), layout.data_dir, log_format(self.environ)
                )
                try:
                    return self._supervise(children, settings, receiver_port)
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
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        write_kubeconfig(layout.kubeconfig, url, token)
        layout.apiserver_url_file.write_text(url + "\n", encoding="utf-8")
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

    def _supervise(self, children: Children, settings: dict[str, str], receiver_port: int) -> int:
        layout = self.layout
        if self.stop_requested.is_set():
            return 0
        self.cluster_url = self._start_cluster(children)
        children.start(
            "webhook receiver",
            ["demo-receiver", "--port", str(receiver_port)],
            layout.webhook_log,
            TIER_CLUSTER,
        )
        credentials = AgentCredentials(
            layout.kubeconfig,
            [(node.name, layout.token_file(node.name)) for node in TOPOLOGY],
            threading.Event(),
        )
        credentials.start()
        try:
            return self._run_cluster(children, credentials, settings)
        finally:
            credentials.stop.set()
            credentials.join(timeout=5)

    def _run_cluster(
        self, children: Children, credentials: AgentCredentials, settings: dict[str, str]
    ) -> int:
        layout = self.layout
        logs = layout.logs_dir
        # A DEVICEDECK_STALE_AFTER of the user's moves it (checked as a number already).
        restart_delay = node_restart_delay(float(settings["STALE_AFTER"]))
        children.start(
            "service",
            ["serve", "--host", self.host, "--port", str(self.port), "--no-migrate"],
            logs / "service.log",
            TIER_SERVICE,
            env=service_env(settings),
        )
        for node in TOPOLOGY:
            root = layout.kubelet_root(node)
            root.mkdir(parents=True, exist_ok=True)
            children.start(
                f"node {node.name}",
                sim_node_args(node, root, layout.kubeconfig),
                logs / f"node-{node.name}.log",
                TIER_NODES,
                restart_delay=restart_delay,
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
            self.metrics_ports[node.name] = free_port(self.host)
            children.start(
                f"agent {node.name}",
                self._agent_args(node.name),
                logs / f"agent-{node.name}.log",
                TIER_AGENTS,
                restart_delay=restart_delay,
            )
        try:
            if not self._supervise_until(children, lambda: _ready(self.base_url)):
                return 0
        except TimeoutError as e:
            raise DemoError(
                f"the service did not become ready in {READY_TIMEOUT_SECONDS:g} s; "
                f"see {logs / 'service.log'}"
            ) from e
        for line in banner(self):
            self.say(line)
        while not self.stop_requested.wait(0.25):
            children.supervise(self.say)
        return 0

    def _agent_args(self, name: str) -> list[str]:
        node = next(n for n in TOPOLOGY if n.name == name)
        args = agent_args(
            node, self.layout.kubelet_root(node), self.server, self.layout.token_file(name)
        )
        args += ["--heartbeat", f"{AGENT_HEARTBEAT_SECONDS:g}"]
        args += ["--metrics-address", self.host, "--metrics-port", str(self.metrics_ports[name])]
        return [*args, "--log-format", log_format(self.environ)]

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
