"""The pieces of the demos, in process: kubelet-root layout, the commands each node runs,
the reusable agent token and the control-socket workload of the compose nodes."""

from __future__ import annotations

import io
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.credentials.tokens import authenticate, list_tokens
from devicedeck.demo.environment import (
    STALE_AFTER_SECONDS,
    base_env,
    ignored_settings,
    service_settings,
)
from devicedeck.demo.layout import DemoError, DemoLayout, check_port_free, exclusive
from devicedeck.demo.runner import Demo, node_restart_delay
from devicedeck.demo.tokens import ensure_token_file
from devicedeck.demo.topology import TOPOLOGY, agent_args, root_fits, sim_node_args
from devicedeck.demo.workload import RemoteWorkload
from devicedeck.kubelet.paths import UNIX_SOCKET_PATH_MAX
from devicedeck.sim.apiserver.server import url_host
from devicedeck.sim.kubelet import SimKubelet
from devicedeck.sim.kubelet.control import ControlUnavailable, call, control_socket_path
from devicedeck.sim.node import PluginSpec as SimNodePlugin
from devicedeck.sim.plugin import SimDevicePlugin
from devicedeck.sim.workload import WORKLOAD_NAMESPACES

from .helpers import REPO, help_succeeds, parse_command, wait_until


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dd", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_demo_command_defaults_match_make_run() -> None:
    assert "Ctrl-C" in help_succeeds("demo")
    args = parse_command(["demo"])
    # `make run` runs `devicedeck demo` bare: local only, the port the README names, and
    # the gitignored data directory.
    assert (args.host, args.port, str(args.data_dir)) == ("127.0.0.1", 8000, "devicedeck-data")
    assert "/devicedeck-data/" in (REPO / ".gitignore").read_text().splitlines()


def test_kubelet_roots_stay_in_the_data_dir_when_socket_paths_fit(short_dir: Path) -> None:
    layout = DemoLayout.for_data_dir(short_dir / "data")
    assert layout.kubelet_dir == short_dir / "data" / "kubelet"
    assert all(root_fits(layout.kubelet_root(n)) for n in TOPOLOGY)


def test_deep_data_dir_moves_kubelet_roots_to_a_short_stable_dir() -> None:
    deep = Path("/tmp") / ("very-long-directory-name-" * 4) / "devicedeck-data"
    layout = DemoLayout.for_data_dir(deep)
    assert layout.data_dir == deep
    assert str(layout.kubelet_dir).startswith("/tmp/devicedeck-")
    assert layout.kubelet_dir == DemoLayout.for_data_dir(deep).kubelet_dir
    assert layout.kubelet_dir != DemoLayout.for_data_dir(deep.parent / "other").kubelet_dir
    for node in TOPOLOGY:
        root = layout.kubelet_root(node)
        assert root_fits(root)
        longest = root / "device-plugins" / "nvidia.com-mig-1g.10gb.sock"
        assert len(str(longest)) <= UNIX_SOCKET_PATH_MAX
    # The database, token and logs stay in the data dir.
    assert layout.database_url == f"sqlite:///{deep}/devicedeck.db"
    assert layout.token_file("gpu-a").parent.parent == deep


def test_a_second_demo_on_the_same_data_dir_is_refused(short_dir: Path) -> None:
    lock = short_dir / ".demo.lock"
    with exclusive(lock), pytest.raises(DemoError, match="another demo is running"):  # noqa: SIM117
        with exclusive(lock):
            pass
    with exclusive(lock):  # released when the first demo ends
        pass


def test_a_busy_port_is_reported_with_the_flag_to_change_it() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(DemoError, match="--port"):
            check_port_free("127.0.0.1", port)


def test_the_service_gets_the_environments_settings_but_the_demos_own(short_dir: Path) -> None:
    layout = DemoLayout.for_data_dir(short_dir / "data")
    environ = {
        "PATH": "/usr/bin",
        "DEVICEDECK_STALE_AFTER": "30",
        "DEVICEDECK_AUTH": "token",
        "DEVICEDECK_DATABASE_URL": "postgresql://elsewhere/db",
        "DEVICEDECK_WEBHOOK_URL": "https://hooks.example/a",
        "DEVICEDECK_LOG_FORMAT": "json",
    }
    settings = service_settings(environ, layout, "http://127.0.0.1:9/")
    assert settings["STALE_AFTER"] == "30"  # the demo's 10 gives way
    assert (settings["AUTH"], settings["DATABASE_URL"]) == ("off", layout.database_url)
    assert settings["KUBECONFIG"] == str(layout.kubeconfig)
    assert settings["WEBHOOK_URL"] == "https://hooks.example/a,http://127.0.0.1:9/"
    assert ignored_settings(environ) == ["DEVICEDECK_DATABASE_URL", "DEVICEDECK_AUTH"]
    # The other processes get the log format only.
    children = base_env(environ)
    assert {k for k in children if k.startswith("DEVICEDECK_")} == {"DEVICEDECK_LOG_FORMAT"}
    assert service_settings({}, layout, "http://127.0.0.1:9/")["STALE_AFTER"] == "10"


def test_a_setting_the_service_would_refuse_stops_the_demo_before_it_starts(
    short_dir: Path,
) -> None:
    out = io.StringIO()
    environ = {"DEVICEDECK_WEBHOOK_URL": "https://user:pa55word-x@hooks.example/a, not a url"}
    code = Demo("127.0.0.1", 0, short_dir / "data", out, environ).run()
    assert code == 1
    # The demo adds its own receiver to the list: a third entry.
    assert "DEVICEDECK_WEBHOOK_URL" in out.getvalue() and "entry 2 of 3" in out.getvalue()
    assert "pa55word" not in out.getvalue()
    # Nothing was started or created: no database, no logs.
    assert not (short_dir / "data" / "devicedeck.db").exists()
    assert not (short_dir / "data" / "logs").exists()


def test_a_dead_nodes_processes_wait_until_its_stale_alert_has_fired() -> None:
    assert node_restart_delay(STALE_AFTER_SECONDS) == 30  # what the README says
    # A DEVICEDECK_STALE_AFTER of the user's moves the wait with it.
    assert node_restart_delay(60) - 60 == node_restart_delay(STALE_AFTER_SECONDS) - 10


def test_url_host_for_wildcard_and_ipv6_addresses() -> None:
    assert url_host("0.0.0.0") == "127.0.0.1"
    assert url_host("::") == "[::1]"
    assert url_host("::1") == "[::1]"
    assert url_host("localhost") == "localhost"


def test_each_demo_node_is_a_sim_node_with_the_topology_plugins_and_an_agent() -> None:
    names = [n.name for n in TOPOLOGY]
    assert names == ["gpu-a", "dongle-b", "mixed-c"]
    gpu = next(p for p in TOPOLOGY[0].plugins if p.profile == "gpu")
    assert (gpu.count, gpu.numa) == (8, 2)
    assert any(p.profile == "mig" for p in TOPOLOGY[0].plugins)
    for node in TOPOLOGY:
        args = parse_command(sim_node_args(node, "/tmp/r", "/tmp/kubeconfig"))
        assert args.plugin == [SimNodePlugin(p.resource, p.count, p.profile) for p in node.plugins]
        assert (args.node, args.workload, str(args.root)) == (
            node.name,
            node.workload_seed,
            "/tmp/r",
        )
        agent = parse_command(agent_args(node, "/tmp/r", "http://127.0.0.1:8000", "/tmp/t"))
        assert (agent.node, str(agent.kubelet_root)) == (node.name, "/tmp/r")
        assert str(agent.token_file) == "/tmp/t"
    # Each node has different workload seeds, so nodes do not move in lockstep.
    assert len({n.workload_seed for n in TOPOLOGY}) == len(TOPOLOGY)


def test_token_file_is_created_once_and_reused(
    session_factory: sessionmaker[Session], short_dir: Path
) -> None:
    path = short_dir / "agent.token"
    token, created = ensure_token_file(
        session_factory, path, "demo-agents", ["ingest"], node="gpu-a"
    )
    assert created
    assert path.read_text().strip() == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with session_factory() as session:
        found = authenticate(session, token, utcnow())
    assert found is not None
    assert found.principal.has("ingest") and not found.principal.has("admin")
    assert found.principal.node == "gpu-a" and not found.principal.may_write_node("gpu-b")

    again, created = ensure_token_file(
        session_factory, path, "demo-agents", ["ingest"], node="gpu-a"
    )
    assert (again, created) == (token, False)
    with session_factory() as session:
        assert [t.name for t in list_tokens(session)] == ["demo-agents"]


def test_token_file_with_an_unknown_token_gets_a_new_one(
    session_factory: sessionmaker[Session], short_dir: Path
) -> None:
    path = short_dir / "agent.token"
    ensure_token_file(session_factory, path, "demo-agents", ["ingest"], node="gpu-a")
    # The plaintext is lost (say, the file was replaced): the name is taken, so -2 it is.
    path.write_text("ddk_not-a-token-the-database-knows\n")
    token, created = ensure_token_file(
        session_factory, path, "demo-agents", ["ingest"], node="gpu-a"
    )
    assert created
    assert path.read_text().strip() == token
    with session_factory() as session:
        assert [t.name for t in list_tokens(session)] == ["demo-agents", "demo-agents-2"]
        assert authenticate(session, token, utcnow()) is not None


@pytest.fixture
def kubelet_with_plugin(short_dir: Path) -> Iterator[Path]:
    kubelet = SimKubelet(short_dir)
    kubelet.start()
    plugin = SimDevicePlugin(
        "example.com/dongle", root=short_dir, count=6, profile="dongle", numa_nodes=0
    )
    try:
        plugin.start()
        assert plugin.wait_for_registration(timeout=10)
        wait_until(
            lambda: (
                call(control_socket_path(short_dir), {"op": "node.status"})["resources"]
                .get("example.com/dongle", {})
                .get("capacity")
            ),
            message="the plugin's devices at the kubelet",
        )
        yield short_dir
    finally:
        plugin.stop()
        kubelet.stop()


def workload_pods(root: Path) -> list[dict[str, Any]]:
    pods = call(control_socket_path(root), {"op": "pod.list"})["pods"]
    return [p for p in pods if p["namespace"] in WORKLOAD_NAMESPACES]


def test_remote_workload_creates_and_deletes_pods_through_the_control_socket(
    kubelet_with_plugin: Path,
) -> None:
    workload = RemoteWorkload(kubelet_with_plugin, seed=5, interval_seconds=3600)
    workload.step()
    (first,) = workload_pods(kubelet_with_plugin)
    devices = [c["devices"] for c in first["containers"] if c["devices"]]
    assert devices and all("example.com/dongle" in d for d in devices)
    for _ in range(30):
        workload.step()
    assert workload.created >= 2 and workload.deleted >= 1
    assert len(workload_pods(kubelet_with_plugin)) == workload.created - workload.deleted


def test_remote_workload_leaves_devices_for_pods_by_hand(kubelet_with_plugin: Path) -> None:
    """Like sim-node's workload: a quarter of the devices stay free (one of six dongles)."""
    workload = RemoteWorkload(kubelet_with_plugin, seed=5, interval_seconds=3600)

    def free() -> int:
        status = call(control_socket_path(kubelet_with_plugin), {"op": "node.status"})
        held = {
            device_id
            for pod in workload_pods(kubelet_with_plugin)
            for container in pod["containers"]
            for device_id in container["devices"]
            .get("example.com/dongle", {})
            .get("device_ids", [])
        }
        devices = status["resources"]["example.com/dongle"]["devices"]
        return sum(1 for d in devices if d["health"] == "Healthy" and d["id"] not in held)

    lowest = 6
    for _ in range(40):
        workload.step()
        lowest = min(lowest, free())
    assert lowest == 1
    assert workload.held_back >= 1


def test_remote_workload_waits_for_the_kubelet_then_drives_it(
    short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    workload = RemoteWorkload(short_dir, seed=1, interval_seconds=0.05)
    with pytest.raises(ControlUnavailable):
        workload.step()
    stop = threading.Event()
    runner = threading.Thread(target=workload.run, args=(stop,))
    kubelet = SimKubelet(short_dir)
    plugin = SimDevicePlugin("example.com/dongle", root=short_dir, count=2, numa_nodes=0)
    runner.start()
    try:
        wait_until(lambda: "kubelet unreachable" in caplog.text, message="a retry warning")
        assert runner.is_alive()
        # The kubelet container starts late (or restarts): the workload carries on.
        kubelet.start()
        plugin.start()
        wait_until(lambda: workload.created >= 1, message="a pod from the workload")
        assert workload_pods(short_dir)
    finally:
        stop.set()
        runner.join(timeout=10)
        plugin.stop()
        kubelet.stop()
    assert not runner.is_alive()
