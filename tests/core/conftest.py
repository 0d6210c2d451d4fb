"""Fixtures and snapshot builders for the core service tests (ingest, queries, auth, API)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, select
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.config import Settings
from devicedeck.inventory.models import Base
from devicedeck.main import create_app

from .driver_trace import DriverTrace

OBSERVED_AT = "2026-12-02T12:00:00Z"
BOOT = "boot-a"
GPU = "example.com/gpu"
NIC = "example.com/nic"

Json = dict[str, Any]


def dev(device_id: str, health: str = "Healthy", numa: list[int] | None = None) -> Json:
    """One device as ListAndWatchResponse prints it in proto3 JSON."""
    body: Json = {"ID": device_id, "health": health}
    if numa is not None:
        body["topology"] = {"nodes": [{"ID": n} for n in numa]}
    return body


def listandwatch(
    node: str,
    devices: list[Json],
    seq: int,
    *,
    resource: str = GPU,
    boot: str = BOOT,
    **extra: Any,
) -> Json:
    """A ListAndWatch snapshot body."""
    return {
        "node": node,
        "resource": resource,
        "source": {"boot_id": boot, "seq": seq},
        "observed_at": OBSERVED_AT,
        "devices": devices,
        **extra,
    }


def held(resource: str, *device_ids: str, numa: list[int] | None = None) -> Json:
    """One ContainerDevices entry (snake_case names)."""
    body: Json = {"resource_name": resource, "device_ids": list(device_ids)}
    if numa is not None:
        body["topology"] = {"nodes": [{"ID": n} for n in numa]}
    return body


def pod(
    name: str,
    namespace: str = "ml",
    containers: dict[str, list[Json]] | None = None,
    **extra: Any,
) -> Json:
    """One PodResources entry; containers maps a container name to its device entries."""
    return {
        "name": name,
        "namespace": namespace,
        "containers": [
            {"name": cname, "devices": entries} for cname, entries in (containers or {}).items()
        ],
        **extra,
    }


def holding_a_claim(name: str, node: str, claim: str = "claim") -> Json:
    """A pod whose container holds a DRA claim on `node`: a PodResources snapshot listing it,
    or from a node holding claims, is applied on the session path on PostgreSQL too."""
    resources = [{"driver_name": "gpu.example.com", "pool_name": node, "device_name": "dra-0"}]
    container = {
        "name": "main",
        "devices": [],
        "dynamic_resources": [
            {"claim_name": claim, "claim_namespace": "ml", "claim_resources": resources}
        ],
    }
    return {**pod(name), "containers": [container]}


def podresources(node: str, pods: list[Json], seq: int, *, boot: str = BOOT, **extra: Any) -> Json:
    """A PodResources snapshot body."""
    return {
        "node": node,
        "source": {"boot_id": boot, "seq": seq},
        "observed_at": OBSERVED_AT,
        "pod_resources": pods,
        **extra,
    }


class Api:
    """The service over HTTP with a token holding every scope."""

    def __init__(self, client: TestClient, headers: dict[str, str]) -> None:
        self.client = client
        self.headers = headers

    def post(self, path: str, body: Any, expect: int | None = 200) -> httpx.Response:
        response = self.client.post(path, json=body, headers=self.headers)
        if expect is not None:
            assert response.status_code == expect, response.text
        return response

    def ingest_listandwatch(self, body: Json, expect: int | None = 200) -> Json:
        result: Json = self.post("/api/v1/ingest/listandwatch", body, expect).json()
        return result

    def ingest_podresources(self, body: Json, expect: int | None = 200) -> Json:
        result: Json = self.post("/api/v1/ingest/podresources", body, expect).json()
        return result

    def get(self, path: str, expect: int | None = 200, **params: Any) -> Any:
        response = self.client.get(path, params=params, headers=self.headers)
        if expect is not None:
            assert response.status_code == expect, response.text
        return response.json()

    def all_pages(self, path: str, **params: Any) -> list[Json]:
        """Every item of a list, following `next` links; fails on a loop."""
        items: list[Json] = []
        page = self.get(path, **params)
        items.extend(page["results"])
        seen_urls: set[str] = set()
        while page["next"]:
            assert page["next"] not in seen_urls, "pagination loops"
            seen_urls.add(page["next"])
            response = self.client.get(page["next"], headers=self.headers)
            assert response.status_code == 200, response.text
            page = response.json()
            items.extend(page["results"])
        return items

    def devices(self, **params: Any) -> list[Json]:
        return self.all_pages("/api/v1/devices", limit=1000, **params)

    def device(self, node: str, device_id: str, resource: str = GPU) -> Json:
        found = [
            d
            for d in self.devices(node=node, resource=resource, state="any")
            if d["device_id"] == device_id
        ]
        assert len(found) == 1, found
        detail: Json = self.get(f"/api/v1/devices/{found[0]['id']}")
        return detail

    def events(self, **params: Any) -> list[Json]:
        return self.all_pages("/api/v1/events", limit=1000, **params)


@pytest.fixture
def api(client: TestClient, auth: dict[str, str]) -> Api:
    return Api(client, auth)


MakeApi = Callable[..., Api]


@pytest.fixture
def make_api(settings: Settings, auth: dict[str, str]) -> Iterator[MakeApi]:
    """Another app on the same database with some settings changed; closed at teardown."""
    with ExitStack() as stack:

        def make(**overrides: Any) -> Api:
            app = create_app(settings.model_copy(update=overrides))
            return Api(stack.enter_context(TestClient(app)), auth)

        yield make


def table_rows(session: Session, *, skip: dict[str, set[str]] | None = None) -> dict[str, list]:
    """Every row of every table as tuples, in primary-key order, minus the skipped columns.

    Comparing two of these shows whether anything at all changed in the database.
    """
    skip = skip or {}
    dump: dict[str, list] = {}
    for table in Base.metadata.sorted_tables:
        columns = [c for c in table.columns if c.name not in skip.get(table.name, set())]
        if not columns:
            continue
        order = list(table.primary_key.columns)
        rows = session.execute(select(*columns).order_by(*order)).all()
        dump[table.name] = [tuple(row) for row in rows]
    return dump


# Columns that change on every authenticated request or accepted snapshot by design.
VOLATILE = {"api_tokens": {"last_used_at"}}


@pytest.fixture
def db_rows(session_factory: sessionmaker[Session]) -> Callable[..., dict[str, list]]:
    def dump(skip: dict[str, set[str]] | None = None) -> dict[str, list]:
        with session_factory() as session:
            return table_rows(session, skip={**VOLATILE, **(skip or {})})

    return dump


class StatementCounter:
    """Counts SQL statements sent through an engine while active."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.statements: list[str] = []
        self.active = False

    def _on_execute(self, *args: Any) -> None:
        if self.active:
            self.statements.append(str(args[2]))

    def __enter__(self) -> StatementCounter:
        self.statements.clear()
        self.active = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.active = False

    @property
    def count(self) -> int:
        return len(self.statements)


@pytest.fixture
def quiet_api(settings: Settings, auth: dict[str, str]) -> Iterator[Api]:
    """The API of an app without the background work other parts add (live updates, cluster
    watcher), whose statements would land on the same engine at unpredictable moments. Its
    tokens stay checked for the whole test: on a busy machine the default cache could expire
    between two requests a test compares, and add the token's lookup to one of them."""
    app = create_app(settings.model_copy(update={"token_cache_seconds": 3600}))
    app.state.background_starters.clear()
    with TestClient(app) as client:
        yield Api(client, auth)


@pytest.fixture
def statements(quiet_api: Api) -> Iterator[StatementCounter]:
    """Counts the statements quiet_api's app sends through SQLAlchemy: on its engine and, on
    PostgreSQL, on the async engine that ingest uses in the event loop."""
    state = quiet_api.client.app.state  # type: ignore[attr-defined]
    engine: Engine = state.engine
    engines = [engine]
    if state.event_loop_database is not None:
        engines.append(state.event_loop_database.transactional.sync_engine)
    counter = StatementCounter(engine)
    for watched in engines:
        event.listen(watched, "before_cursor_execute", counter._on_execute)
    yield counter
    for watched in engines:
        event.remove(watched, "before_cursor_execute", counter._on_execute)


@pytest.fixture
def driver_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DriverTrace]:
    """Every database connection opened from now on, traced at its driver (driver_trace.py)."""
    directory = tmp_path / "driver-trace"
    directory.mkdir()
    trace = DriverTrace(directory)
    trace.install(monkeypatch)
    yield trace
    trace.close()


@pytest.fixture
def traced_api(driver_trace: DriverTrace, quiet_api: Api) -> Api:
    """quiet_api, opened after driver_trace: every statement its app sends on any connection,
    the driver's own included, is seen by `driver_trace.measure()`."""
    return quiet_api


def wait_until(predicate: Callable[[], object], timeout: float = 60.0, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@contextmanager
def live_server(app: FastAPI) -> Iterator[str]:
    """The app under a real uvicorn on a free local port; yields its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), what="uvicorn to start")
        assert server.started, "uvicorn did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        assert not thread.is_alive(), "uvicorn did not stop"


@pytest.fixture
def server_url(settings: Settings) -> Iterator[str]:
    with live_server(create_app(settings)) as url:
        yield url
