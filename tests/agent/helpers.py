"""Real processes for the agent tests: the service, a simulated node and the agent itself,
plus a reader for the service's API. Every process is stopped and every file closed."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import httpx

from devicedeck.sim.kubelet.control import ControlError, call, control_socket_path

DEVICEDECK = str(Path(sys.executable).with_name("devicedeck"))
GPU = "example.com/gpu"
DONGLE = "example.com/dongle"


def wait_until(
    predicate: Callable[[], Any], timeout: float = 60.0, message: str = "condition"
) -> Any:
    """Poll until predicate() is truthy; return its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        # Not faster: every poll is an API query competing for the CPU with the agent.
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` holds the socket listening on 127.0.0.1:`port`.

    free_port() reserves nothing: until a service binds its port (seconds, on a busy machine),
    another test process may pick the same one and serve there, and then answers every
    request meant for this one; only the socket's owner tells them apart.
    """
    address = f"0100007F:{port:04X}"  # 127.0.0.1 as /proc/net/tcp writes it
    listening = set()
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[1] == address and fields[3] == "0A":  # 0A: LISTEN
                listening.add(f"socket:[{fields[9]}]")
    if not listening:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in listening:
                return True
        except OSError:
            continue
    return False


class Process:
    """A child process whose output goes to a log file; stop() ends it with SIGTERM."""

    def __init__(self, name: str, argv: Sequence[str], log_dir: Path, env: dict[str, str]):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        self._env = env
        self._log: IO[bytes] | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, env=self._env
        )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> int | None:
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            code = self.proc.returncode
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def kill(self) -> None:
        """SIGKILL, as `pkill -9` does: the process says no goodbye."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        self.stop()

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVICEDECK_")}
    env.update(extra)
    return env


class PortTaken(Exception):
    """Another process bound the port picked for the service before it did."""


class Service:
    """`devicedeck serve` on a fixed port, restartable on the same port and database."""

    def __init__(
        self,
        database_url: str,
        log_dir: Path,
        port: int | None = None,
        *,
        serve_args: Sequence[str] = (),
        verify: ssl.SSLContext | None = None,
    ) -> None:
        """`serve_args` are added to `devicedeck serve`; with `verify` (what the service's
        certificate is checked against) it serves HTTPS."""
        self.port = port or free_port()
        self.scheme = "https" if verify is not None else "http"
        self.verify: ssl.SSLContext | bool = verify if verify is not None else True
        self.serve_args = list(serve_args)
        self.url = f"{self.scheme}://127.0.0.1:{self.port}"
        self.env = base_env(DEVICEDECK_DATABASE_URL=database_url, DEVICEDECK_AUTH="token")
        self._log_dir = log_dir
        self._process: Process | None = None
        self.starts = 0
        # A port picked here may go to another process before the first start binds it; one
        # given by the caller, or used already, is the service's address and is kept.
        self._port_may_change = port is None

    def start(self) -> None:
        for _ in range(5):
            if self._start_once():
                self._port_may_change = False
                return
            self.port = free_port()
            self.url = f"{self.scheme}://127.0.0.1:{self.port}"
        raise AssertionError(f"every port picked was taken:\n{self.output()}")

    def _start_once(self) -> bool:
        """True once the service serves; False if its port, still free to change, was taken."""
        self.starts += 1
        argv = [
            DEVICEDECK,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.serve_args,
        ]
        if self.starts > 1:
            argv.append("--no-migrate")  # migrated by the first start
        self._process = Process(f"service-{self.starts}", argv, self._log_dir, self.env)
        self._process.start()
        try:
            # Its first start migrates a new database: slow while every core is busy.
            wait_until(self._ready, timeout=120, message=f"service on port {self.port}")
        except PortTaken:
            self.stop()
            return False
        except BaseException:
            self.stop()
            raise
        return True

    def _ready(self) -> bool:
        assert self._process is not None
        if not self._process.alive():
            output = self._process.output()
            if self._port_may_change and "address already in use" in output:
                raise PortTaken(self.port)
            raise AssertionError(f"service exited:\n{output}")
        # Whoever else listens on the port answers too; only this process's socket counts.
        if not listens_on(self._process.pid, self.port):
            return False
        try:
            livez = httpx.get(f"{self.url}/livez", timeout=1, verify=self.verify)
            return livez.status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None

    def kill(self) -> None:
        """End the service as a crash or a lost node would: SIGKILL, no shutdown at all."""
        if self._process is not None and self._process.proc is not None:
            self._process.proc.kill()
            self._process.proc.wait()
        self.stop()

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def output(self) -> str:
        return self._process.output() if self._process is not None else ""

    def create_token(self, name: str, *scopes: str, node: str | None = None) -> str:
        argv = [DEVICEDECK, "token", "create", "--name", name]
        for scope in scopes:
            argv += ["--scope", scope]
        if "ingest" in scopes:
            argv += ["--node", node] if node else ["--all-nodes"]
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, check=True)
        return done.stdout.strip().splitlines()[-1]


class SimNode:
    """`devicedeck sim-node` on a kubelet root; restartable (a kubelet restart)."""

    def __init__(
        self, root: Path, plugins: Sequence[str], log_dir: Path, extra: Sequence[str] = ()
    ) -> None:
        self.root = root
        self.plugins = list(plugins)
        self.extra = list(extra)
        # RESOURCE:COUNT[:PROFILE] -> the device count the node must report before use.
        self.expected = {p.split(":")[0]: int(p.split(":")[1]) for p in plugins}
        self._log_dir = log_dir
        self._process: Process | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        argv = [DEVICEDECK, "sim-node", "--root", str(self.root)]
        for plugin in self.plugins:
            argv += ["--plugin", plugin]
        argv += self.extra
        self._process = Process(f"sim-node-{self.starts}", argv, self._log_dir, base_env())
        self._process.start()
        try:
            wait_until(self._ready, message="sim-node plugins registered")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        assert self._process is not None
        if not self._process.alive():
            raise AssertionError(f"sim-node exited:\n{self._process.output()}")
        try:
            status = self.control({"op": "node.status"}, timeout=2)
        except (ControlError, OSError):
            return False
        resources = status["resources"]
        return {r: s["allocatable"] for r, s in resources.items() if s["plugin_connected"]} == (
            self.expected
        )

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None

    def control(self, request: dict[str, Any], timeout: float = 30) -> Any:
        return call(control_socket_path(self.root), request, timeout=timeout)

    def create_pod(self, namespace: str, name: str, requests: dict[str, int]) -> dict[str, Any]:
        containers = [{"name": "main", "requests": requests}]
        pod: dict[str, Any] = self.control(
            {"op": "pod.create", "namespace": namespace, "name": name, "containers": containers}
        )
        return pod

    def delete_pod(self, namespace: str, name: str) -> None:
        self.control({"op": "pod.delete", "namespace": namespace, "name": name})

    def set_health(self, resource: str, device: str, health: str) -> None:
        self.control(
            {"op": "device.health", "resource": resource, "device_id": device, "health": health}
        )

    def device_ids(self, resource: str) -> list[str]:
        status = self.control({"op": "node.status"})
        return sorted(d["id"] for d in status["resources"][resource]["devices"])

    def sim_ctl(self, *args: str) -> str:
        done = subprocess.run(
            [DEVICEDECK, "sim-ctl", "--root", str(self.root), *args],
            env=base_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout


def agent_process(
    log_dir: Path,
    *,
    node: str,
    server: str,
    token_file: Path,
    root: Path,
    extra: Sequence[str] = (),
    name: str = "agent",
) -> Process:
    argv = [
        DEVICEDECK,
        "agent",
        "--node",
        node,
        "--server",
        server,
        "--token-file",
        str(token_file),
        "--kubelet-root",
        str(root),
        *extra,
    ]
    return Process(name, argv, log_dir, base_env())


def allocations_of(
    devices: dict[tuple[str, str], dict[str, Any]],
) -> dict[tuple[str, str], tuple[str, str, str | None]]:
    return {
        key: (d["allocation"]["namespace"], d["allocation"]["pod"], d["allocation"]["pod_uid"])
        for key, d in devices.items()
        if d["allocation"] is not None
    }


def counts(api: Api, node: str) -> tuple[int, int]:
    """(devices, allocated devices) of a node, from one query."""
    devices = api.devices(node)
    return len(devices), len(allocations_of(devices))


class Api:
    """Reads the service's JSON API with a read token."""

    def __init__(self, url: str, token: str, verify: ssl.SSLContext | bool = True) -> None:
        self._http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=5, verify=verify
        )

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, **params: Any) -> Any:
        response = self._http.get(path, params=params)
        response.raise_for_status()
        return response.json()

    def try_get(self, path: str, **params: Any) -> Any:
        try:
            return self.get(path, **params)
        except httpx.HTTPError:
            return None

    def devices(self, node: str) -> dict[tuple[str, str], dict[str, Any]]:
        page = self.try_get("/api/v1/devices", node=node, state="any", limit=1000)
        if page is None:
            return {}
        return {(d["resource"], d["device_id"]): d for d in page["results"]}

    def allocations(self, node: str) -> dict[tuple[str, str], tuple[str, str, str | None]]:
        """(resource, device ID) -> (namespace, pod, pod UID) for current allocations."""
        return allocations_of(self.devices(node))

    def events(self, node: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        page = self.get("/api/v1/events", node=node, limit=1000)
        events.extend(page["results"])
        while page.get("next"):
            page = self._http.get(page["next"]).raise_for_status().json()
            events.extend(page["results"])
        return events
