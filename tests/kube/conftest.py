"""Fixtures for the cluster integration: a fake API server, a kubeconfig for it, the service."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, KubeMode, Settings
from devicedeck.db import write_session
from devicedeck.inventory.schemas import ListAndWatchSnapshot, PodResourcesSnapshot
from devicedeck.inventory.write.ingest import apply_snapshot
from devicedeck.main import create_app

from .fake_apiserver import FakeApiServer

FAKE_TOKEN = "fake-service-account-token"
T = TypeVar("T")


def write_kubeconfig(path: Path, server: str, token: str = FAKE_TOKEN) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "devicedeck", "user": {"token": token}}],
                "contexts": [
                    {"name": "fake", "context": {"cluster": "fake", "user": "devicedeck"}}
                ],
                "current-context": "fake",
            }
        )
    )
    return path


@pytest.fixture(autouse=True)
def no_threads_left() -> Iterator[None]:
    """The service must stop every watch thread it started, and the fake its handlers."""
    before = set(threading.enumerate())
    yield
    left = [
        t.name
        for t in threading.enumerate()
        if t not in before and t.is_alive() and t.name.startswith(("kube-", "sim-apiserver"))
    ]
    assert not left, f"threads still running: {left}"


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    fake = FakeApiServer(token=FAKE_TOKEN).start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def kubeconfig(tmp_path: Path, fake_api: FakeApiServer) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", fake_api.url)


@pytest.fixture
def kube_settings(database_url: str, kubeconfig: Path) -> Settings:
    return Settings(
        database_url=database_url,
        auth=AuthMode.TOKEN,
        kube=KubeMode.KUBECONFIG,
        kubeconfig=str(kubeconfig),
        kube_resync=300,
    )


StartApp = Callable[..., TestClient]


@pytest.fixture
def start_app(kube_settings: Settings) -> Iterator[StartApp]:
    """Start the service (and its watcher) when the test has set up the cluster."""
    with ExitStack() as stack:

        def start(**overrides: Any) -> TestClient:
            settings = kube_settings.model_copy(update=overrides)
            return stack.enter_context(TestClient(create_app(settings)))

        yield start


def wait_for(check: Callable[[], T | None], timeout: float = 60.0, what: str = "") -> T:
    """Poll until check() returns something truthy; fail with `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(0.02)


Factory = sessionmaker[Session]


def ingest_devices(
    factory: Factory, node: str, resource: str, devices: dict[str, str], seq: int = 1
) -> None:
    snapshot = ListAndWatchSnapshot.model_validate(
        {
            "node": node,
            "resource": resource,
            "source": {"boot_id": "boot-1", "seq": seq},
            "observed_at": utcnow().isoformat(),
            "devices": [{"ID": d, "health": h} for d, h in devices.items()],
        }
    )
    with write_session(factory) as session:
        apply_snapshot(session, snapshot, now=utcnow(), actor="agent")


def ingest_allocations(
    factory: Factory,
    node: str,
    pods: list[tuple[str, str, str, list[str]]],
    seq: int = 1,
) -> None:
    """pods: (namespace, name, resource, device IDs) held by container "main"."""
    snapshot = PodResourcesSnapshot.model_validate(
        {
            "node": node,
            "source": {"boot_id": "boot-1", "seq": seq},
            "observed_at": utcnow().isoformat(),
            "pod_resources": [
                {
                    "namespace": namespace,
                    "name": name,
                    "containers": [
                        {
                            "name": "main",
                            "devices": [{"resource_name": resource, "device_ids": ids}],
                        }
                    ],
                }
                for namespace, name, resource, ids in pods
            ],
        }
    )
    with write_session(factory) as session:
        apply_snapshot(session, snapshot, now=utcnow(), actor="agent")
