"""docker-compose.yml: parsed and checked for what `docker compose up` would trip over,
and held to the same simulated nodes as `devicedeck demo` (devicedeck/demo/topology.py)."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from devicedeck.demo.topology import (
    COMPOSE_APISERVER,
    COMPOSE_KUBECONFIG,
    COMPOSE_KUBELET_ROOT,
    COMPOSE_TOKEN_FILE,
    DRA_NODE,
    TOPOLOGY,
    compose_apiserver_args,
    compose_node_commands,
    compose_volume,
    sim_dra_driver_args,
)

from .helpers import REPO, help_succeeds, parse_command, subcommands

CORE_SERVICES = {"db", "migrate", "agent-token", "devicedeck"}
CLUSTER_SERVICES = {COMPOSE_APISERVER, "sim-dra-driver"}
ONE_SHOT = {"migrate", "agent-token"}
DEPENDS_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """${NAME:-default} as compose expands it (only the forms the file uses)."""
    env = env or {}

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        assert default is not None, f"${{{name}}} has no default: compose up would need it set"
        return default

    return VARIABLE.sub(substitute, value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def devicedeck_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in services.items() if str(s.get("image", "")).startswith("devicedeck")}


def volume_mounts(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(source, target, mode) of each short-syntax volume entry."""
    mounts = []
    for entry in service.get("volumes", []):
        assert isinstance(entry, str), f"use the short volume syntax: {entry!r}"
        source, target, *mode = entry.split(":")
        mounts.append((source, target, mode[0] if mode else "rw"))
    return mounts


def test_every_command_is_a_devicedeck_subcommand_that_parses(
    services: dict[str, dict[str, Any]],
) -> None:
    known = subcommands()
    ours = devicedeck_services(services)
    assert set(ours) == set(services) - {"db"}
    for name, service in ours.items():
        command = service["command"]
        assert isinstance(command, list), f"{name}: give the command as a list"
        assert command[0] in known, f"{name}: `devicedeck {command[0]}` does not exist"
        help_succeeds(command[0])
        # Parsing the whole command catches renamed or mistyped flags.
        parse_command(command)


def test_the_service_image_is_built_from_the_dockerfile(
    services: dict[str, dict[str, Any]],
) -> None:
    images = {s["image"] for s in devicedeck_services(services).values()}
    assert images == {"devicedeck:local"}
    for name, service in devicedeck_services(services).items():
        assert service["build"]["context"] == ".", name
    assert (REPO / "Dockerfile").is_file()


def test_named_volumes_are_declared_and_used(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    declared = set(compose["volumes"])
    used = set()
    for name, service in services.items():
        for source, target, mode in volume_mounts(service):
            assert not source.startswith((".", "/")), f"{name}: no bind mounts, named volumes only"
            assert source in declared, f"{name}: volume {source} is not declared"
            assert target.startswith("/"), f"{name}: {target} is not an absolute path"
            assert mode in ("rw", "ro"), f"{name}: unknown mode {mode}"
            used.add(source)
    assert used == declared, f"declared but unused: {declared - used}"


def test_depends_on_names_existing_services_with_valid_conditions(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        for target, spec in service.get("depends_on", {}).items():
            assert target in services, f"{name} depends on unknown service {target}"
            condition = spec["condition"]
            assert condition in DEPENDS_CONDITIONS, f"{name}: {condition}"
            if condition == "service_completed_successfully":
                assert target in ONE_SHOT, f"{target} never completes"
            if condition == "service_healthy":
                assert "healthcheck" in services[target] or target == "devicedeck", target
    # One-shot jobs must not restart, or "completed" never comes.
    for name in ONE_SHOT:
        assert "restart" not in services[name], name


def test_only_the_http_services_have_health_checks(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in devicedeck_services(services).items():
        disabled = service.get("healthcheck", {}).get("disable") is True
        assert disabled == (name not in {"devicedeck", COMPOSE_APISERVER}), name
    # The API server's own check: it answers, and its clients' kubeconfig is written.
    check = " ".join(services[COMPOSE_APISERVER]["healthcheck"]["test"])
    assert "/readyz" in check and COMPOSE_KUBECONFIG in check
    assert services["db"]["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")
    assert services["devicedeck"]["depends_on"]["db"]["condition"] == "service_healthy"
    assert services["devicedeck"]["depends_on"]["migrate"]["condition"] == (
        "service_completed_successfully"
    )


@pytest.mark.parametrize("env", [{}, {"POSTGRES_PASSWORD": "s3cret"}])
def test_database_url_points_to_the_db_service(
    services: dict[str, dict[str, Any]], env: dict[str, str]
) -> None:
    db_env = {k: interpolate(str(v), env) for k, v in services["db"]["environment"].items()}
    for name, service in devicedeck_services(services).items():
        url_text = service.get("environment", {}).get("DEVICEDECK_DATABASE_URL")
        if name in CORE_SERVICES:
            assert url_text, f"{name} needs DEVICEDECK_DATABASE_URL"
        if url_text is None:
            continue
        url = make_url(interpolate(url_text, env))
        assert url.drivername == "postgresql+psycopg"
        assert (url.host, url.port or 5432) == ("db", 5432)
        assert url.username == db_env["POSTGRES_USER"]
        assert url.password == db_env["POSTGRES_PASSWORD"]
        assert url.database == db_env["POSTGRES_DB"]


def test_published_port_reaches_the_service(services: dict[str, dict[str, Any]]) -> None:
    serve = parse_command(services["devicedeck"]["command"])
    assert serve.host == "0.0.0.0"
    published = [interpolate(p) for p in services["devicedeck"]["ports"]]
    assert published == [f"8000:{serve.port}"]
    assert interpolate(services["devicedeck"]["ports"][0], {"DEVICEDECK_PORT": "9000"}) == (
        f"9000:{serve.port}"
    )
    published_elsewhere = [n for n, s in services.items() if "ports" in s and n != "devicedeck"]
    assert published_elsewhere == []


def test_agents_reach_the_service_with_the_token_the_token_job_writes(
    services: dict[str, dict[str, Any]],
) -> None:
    serve = parse_command(services["devicedeck"]["command"])
    writer = parse_command(services["agent-token"]["command"])
    assert str(writer.file) == COMPOSE_TOKEN_FILE
    assert writer.scope == ["ingest"]
    # One token per agent, bound to its node.
    assert writer.node == [n.name for n in TOPOLOGY]
    (token_volume,) = [
        s for s, t, _ in volume_mounts(services["agent-token"]) if COMPOSE_TOKEN_FILE.startswith(t)
    ]
    agents = {n: s for n, s in services.items() if n.endswith("-agent")}
    assert len(agents) == len(TOPOLOGY)
    for name, service in agents.items():
        args = parse_command(service["command"])
        assert args.server == f"http://devicedeck:{serve.port}", name
        assert str(args.token_file) == COMPOSE_TOKEN_FILE.replace("{node}", args.node)
        mounts = {(s, t, m) for s, t, m in volume_mounts(service)}
        assert (token_volume, os.path.dirname(COMPOSE_TOKEN_FILE), "ro") in mounts, name
        conditions = {t: c["condition"] for t, c in service["depends_on"].items()}
        assert conditions["agent-token"] == "service_completed_successfully"
        assert conditions["devicedeck"] == "service_healthy"


def test_nodes_are_the_demo_topology_in_separate_containers(
    services: dict[str, dict[str, Any]],
) -> None:
    expected: dict[str, list[str]] = {}
    for node in TOPOLOGY:
        expected.update(compose_node_commands(node))
    node_services = {n: s for n, s in services.items() if n not in CORE_SERVICES | CLUSTER_SERVICES}
    assert set(node_services) == set(expected), (
        "compose nodes differ from devicedeck/demo/topology.py"
    )
    for name, command in expected.items():
        assert node_services[name]["command"] == command, f"{name} differs from the topology"


def test_each_nodes_containers_share_one_kubelet_volume(
    services: dict[str, dict[str, Any]],
) -> None:
    volumes_by_node = {}
    for node in TOPOLOGY:
        names = compose_node_commands(node)
        roles = {n.removeprefix(f"{node.name}-").split("-")[0] for n in names}
        assert roles == {"kubelet", "plugin", "workload", "agent"}
        for name in names:
            kubelet_mounts = [
                (s, m) for s, t, m in volume_mounts(services[name]) if t == COMPOSE_KUBELET_ROOT
            ]
            assert kubelet_mounts == [(compose_volume(node), "rw")], name
            args = parse_command(services[name]["command"])
            root = args.kubelet_root if name.endswith("-agent") else args.root
            assert str(root) == COMPOSE_KUBELET_ROOT, name
        volumes_by_node[node.name] = compose_volume(node)
        for name in names:
            if not name.endswith("-kubelet"):
                assert f"{node.name}-kubelet" in services[name]["depends_on"], name
    # No two nodes share a kubelet: sockets of different nodes must never meet.
    assert len(set(volumes_by_node.values())) == len(TOPOLOGY)


def test_plugins_match_the_demo_nodes_devices(services: dict[str, dict[str, Any]]) -> None:
    from devicedeck.sim.node import PluginSpec as SimNodePlugin

    for node in TOPOLOGY:
        for plugin in node.plugins:
            args = parse_command(services[f"{node.name}-plugin-{plugin.key}"]["command"])
            assert (args.resource, args.count, args.profile) == (
                plugin.resource,
                plugin.count,
                plugin.profile,
            )
            # Same node name, seed and NUMA spread as sim-node in the local demo, so the
            # device ids and topology are the same in both demos.
            assert args.node == node.name
            assert args.numa == plugin.numa
            assert SimNodePlugin.parse(plugin.sim_node_arg) == SimNodePlugin(
                plugin.resource, plugin.count, plugin.profile
            )


def test_the_service_and_the_kubelets_use_the_simulated_api_server(
    services: dict[str, dict[str, Any]],
) -> None:
    apiserver = services[COMPOSE_APISERVER]
    assert apiserver["command"] == compose_apiserver_args()
    args = parse_command(apiserver["command"])
    assert str(args.kubeconfig_out) == COMPOSE_KUBECONFIG
    # The URL in the kubeconfig is the one the other containers reach it by.
    assert args.server_url == f"http://{COMPOSE_APISERVER}:{args.port}"
    assert args.host == "0.0.0.0"
    mounts = {t: (s, m) for s, t, m in volume_mounts(apiserver)}
    kubeconfig_dir = os.path.dirname(COMPOSE_KUBECONFIG)
    kubeconfig_volume, mode = mounts[kubeconfig_dir]
    assert mode == "rw"
    assert str(args.data_dir) in mounts, "the API server's state must live in a volume"

    def reads_the_kubeconfig(name: str) -> None:
        assert (kubeconfig_volume, kubeconfig_dir, "ro") in volume_mounts(services[name]), name
        condition = services[name]["depends_on"][COMPOSE_APISERVER]["condition"]
        assert condition == "service_healthy", name

    service = services["devicedeck"]
    assert service["environment"]["DEVICEDECK_KUBE"] == "kubeconfig"
    assert service["environment"]["DEVICEDECK_KUBECONFIG"] == COMPOSE_KUBECONFIG
    reads_the_kubeconfig("devicedeck")
    for node in TOPOLOGY:
        kubelet = parse_command(services[f"{node.name}-kubelet"]["command"])
        assert (str(kubelet.kubeconfig), kubelet.node) == (COMPOSE_KUBECONFIG, node.name)
        reads_the_kubeconfig(f"{node.name}-kubelet")


def test_the_dra_driver_is_the_demos(services: dict[str, dict[str, Any]]) -> None:
    """Compose runs the simulated DRA driver the demo runs, on the same node."""
    driver = services["sim-dra-driver"]
    assert driver["command"] == sim_dra_driver_args(COMPOSE_KUBECONFIG, COMPOSE_KUBELET_ROOT)
    mounts = set(volume_mounts(driver))
    assert ("kubeconfig", os.path.dirname(COMPOSE_KUBECONFIG), "ro") in mounts
    # The health stream's socket is on the DRA node's kubelet volume, which its agent reads.
    (dra_node,) = [n for n in TOPOLOGY if n.name == DRA_NODE]
    assert (compose_volume(dra_node), COMPOSE_KUBELET_ROOT, "rw") in mounts
    assert "--dra-health" in services[f"{DRA_NODE}-agent"]["command"]
    assert driver["depends_on"][COMPOSE_APISERVER]["condition"] == "service_healthy"
