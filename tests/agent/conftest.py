"""Fixtures for the agent tests: one shared service (SQLite), short kubelet roots, simulated
nodes and agents that are always stopped, whatever the test does, and for the tests that need
one, a simulated API server with a service watching it and sending alerts to a receiver."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from core.webhook_receiver import WebhookReceiver, running

from devicedeck.sim.apiserver import SimApiServer

from .helpers import Api, Process, Service, SimNode, agent_process


@dataclass
class RunningService:
    service: Service
    ingest_token: str
    read_token: str

    @property
    def url(self) -> str:
        return self.service.url


def start_service(database_url: str, log_dir: Path, port: int | None = None) -> RunningService:
    service = Service(database_url, log_dir, port)
    service.start()
    try:
        ingest = service.create_token("agent", "ingest")
        read = service.create_token("reader", "read")
    except BaseException:
        service.stop()
        raise
    return RunningService(service, ingest, read)


@pytest.fixture(scope="session")
def shared_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    """One service for the tests that only need one to be up; each test uses its own node."""
    directory = tmp_path_factory.mktemp("agent-service")
    running = start_service(f"sqlite:///{directory / 'devicedeck.db'}", directory)
    yield running
    running.service.stop()


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """A short directory: kubelet roots under it keep unix socket paths under 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="dd", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def node_name(request: pytest.FixtureRequest) -> str:
    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:10]
    return f"agent-test-{digest}"


@pytest.fixture
def api_for() -> Iterator[Callable[[RunningService], Api]]:
    made: list[Api] = []

    def make(running: RunningService) -> Api:
        api = Api(running.url, running.read_token)
        made.append(api)
        return api

    yield make
    for api in made:
        api.close()


@pytest.fixture
def sim_node(work_dir: Path) -> Iterator[Callable[..., SimNode]]:
    started: list[SimNode] = []

    def start(plugins: Sequence[str], root: Path | None = None, *extra: str) -> SimNode:
        node = SimNode(root or work_dir / "kubelet", plugins, work_dir, extra)
        started.append(node)
        node.start()
        return node

    yield start
    for node in reversed(started):
        node.stop()


@pytest.fixture
def start_agent(work_dir: Path, node_name: str) -> Iterator[Callable[..., Process]]:
    """Start `devicedeck agent`; at the end it must stop cleanly on SIGTERM (exit 0)."""
    started: list[Process] = []

    def start(
        server: str,
        token: str,
        root: Path,
        *extra: str,
        token_file: Path | None = None,
    ) -> Process:
        if token_file is None:
            token_file = work_dir / "token"
            token_file.write_text(token + "\n")
        agent = agent_process(
            work_dir,
            node=node_name,
            server=server,
            token_file=token_file,
            root=root,
            extra=extra,
            name=f"agent-{len(started) + 1}",
        )
        started.append(agent)
        agent.start()
        return agent

    yield start
    codes = {agent.name: agent.stop() for agent in started}
    failed = {name: code for name, code in codes.items() if code != 0}
    assert not failed, f"agents did not stop cleanly: {failed}\n" + "\n".join(
        a.output()[-3000:] for a in started
    )


ADMIN_TOKEN = "sim-admin-token"


@pytest.fixture
def cluster(work_dir: Path) -> Iterator[Path]:
    """The simulated API server; yields its kubeconfig."""
    server = SimApiServer(None, admin_token=ADMIN_TOKEN).start()
    try:
        yield server.write_kubeconfig(work_dir / "kubeconfig")
    finally:
        server.stop()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with running(WebhookReceiver()) as started:
        yield started


@pytest.fixture
def watching_service(
    work_dir: Path, cluster: Path, receiver: WebhookReceiver
) -> Iterator[RunningService]:
    service = Service(f"sqlite:///{work_dir / 'devicedeck.db'}", work_dir)
    service.env.update(
        DEVICEDECK_KUBE="kubeconfig",
        DEVICEDECK_KUBECONFIG=str(cluster),
        DEVICEDECK_WEBHOOK_URL=receiver.url,
    )
    service.start()
    try:
        read = service.create_token("reader", "read")
        yield RunningService(service, "", read)
    finally:
        service.stop()
