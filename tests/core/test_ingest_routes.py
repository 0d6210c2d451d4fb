"""Every route a snapshot can take to the database stores the same thing, at a pinned cost.

A ListAndWatch or PodResources snapshot reaches the database by one of several routes: a
repeat answered before the route validates it (`_answer_early`), the one unchanged-snapshot
statement (alone, or batched with the repeats that arrive while one is in flight), two round
trips on the driver's own connection, the full path in the event loop, the full path in a
worker thread. Which one a snapshot takes depends on the database, the hint of recent content,
the body's size and what arrives at the same moment. Here one sequence of snapshots (new nodes,
health flips, repeats, duplicates, a refused older seq, removals, an agent's restart with a new
boot, a registration, pods holding and releasing devices) goes through each route, forced by a
switch the service has, and must leave the same rows, events and receipts as on SQLite, with
the same answers.

Each route's statements and round trips per step, counted at the drivers (driver_trace.py),
are pinned in statement_baseline.json. A change in them fails with a diff; when the change is
meant, rewrite the baseline with

    DEVICEDECK_REWRITE_STATEMENT_BASELINE=1 .venv/bin/pytest -p no:cacheprovider \\
        tests/core/test_ingest_routes.py

and commit the file with the change that explains it.
"""

from __future__ import annotations

import asyncio
import difflib
import fcntl
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from devicedeck.api.ingest import IngestResponse
from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, Settings
from devicedeck.credentials.tokens import create_token
from devicedeck.db import create_db_engine, make_session_factory, write_session
from devicedeck.inventory.models import Base
from devicedeck.inventory.schemas import ListAndWatchSnapshot, PodResourcesSnapshot, repeat_digest
from devicedeck.inventory.write.ingest import SnapshotIngest
from devicedeck.main import create_app
from devicedeck.web.state import service_state

from .conftest import GPU, NIC, Json, dev, held, listandwatch, pod, podresources
from .driver_trace import DriverTrace, Measured

BASELINE = Path(__file__).with_name("statement_baseline.json")
REWRITE = os.environ.get("DEVICEDECK_REWRITE_STATEMENT_BASELINE") == "1"

LAW = "/api/v1/ingest/listandwatch"
POD_RESOURCES = "/api/v1/ingest/podresources"
TOKEN_NAME = "agents"
PLUGIN = {"endpoint": "gpu.sock", "version": "v1beta1"}


@dataclass
class Step:
    """Snapshots of distinct streams, sent one after the other, or at once where a route
    sends repeats together. `repeats`: each is its stream's last body with the next seq."""

    name: str
    snapshots: list[tuple[str, Json]]
    repeats: bool = False


def law(node: str, devices: list[Json], seq: int, **extra: Any) -> tuple[str, Json]:
    return LAW, listandwatch(node, devices, seq, **extra)


def pods(node: str, held_pods: list[Json], seq: int, **extra: Any) -> tuple[str, Json]:
    return POD_RESOURCES, podresources(node, held_pods, seq, **extra)


TWO_GPUS = [dev("gpu-0", numa=[0]), dev("gpu-1", numa=[1])]
GPU_1_UNHEALTHY = [dev("gpu-0", numa=[0]), dev("gpu-1", "Unhealthy", numa=[1])]
ONLY_GPU_1 = [dev("gpu-1", "Unhealthy", numa=[1])]
NICS = [dev("nic-0")]
TRAINING = [
    pod("train-0", containers={"main": [held(GPU, "gpu-0")]}),
    pod("train-1", containers={"main": [held(GPU, "gpu-1")], "side": [held(NIC, "nic-0")]}),
]
AFTER_TRAINING = [
    pod("train-1", containers={"main": [held(GPU, "gpu-1")], "side": [held(NIC, "nic-0")]}),
    pod("serve-0", "serving", containers={"main": [held(GPU, "gpu-0")]}),
]
SERVING_ON_B = [pod("serve-b", "serving", containers={"main": [held(GPU, "gpu-0", "gpu-1")]})]

STEPS = [
    Step("node-a joins with two GPUs", [law("node-a", TWO_GPUS, 1)]),
    Step(
        "node-a adds a NIC stream, node-b joins",
        [law("node-a", NICS, 1, resource=NIC), law("node-b", TWO_GPUS, 1)],
    ),
    Step(
        "every stream repeats",
        [
            law("node-a", TWO_GPUS, 2),
            law("node-a", NICS, 2, resource=NIC),
            law("node-b", TWO_GPUS, 2),
        ],
        repeats=True,
    ),
    Step("node-a's gpu-1 turns unhealthy", [law("node-a", GPU_1_UNHEALTHY, 3)]),
    Step("the same seq again", [law("node-a", GPU_1_UNHEALTHY, 3)]),
    Step("an older seq is refused", [law("node-a", TWO_GPUS, 2)]),
    Step(
        "pods take devices on both nodes",
        [pods("node-a", TRAINING, 1), pods("node-b", SERVING_ON_B, 1)],
    ),
    Step(
        "every stream repeats again",
        [
            law("node-a", GPU_1_UNHEALTHY, 4),
            law("node-a", NICS, 3, resource=NIC),
            law("node-b", TWO_GPUS, 3),
            pods("node-a", TRAINING, 2),
            pods("node-b", SERVING_ON_B, 2),
        ],
        repeats=True,
    ),
    Step(
        "a pod ends, another starts",
        [pods("node-a", AFTER_TRAINING, 3)],
    ),
    Step("node-a's gpu-0 is removed", [law("node-a", ONLY_GPU_1, 5)]),
    Step(
        "node-a's agent restarts: a new boot from seq 1",
        [
            law("node-a", ONLY_GPU_1, 1, boot="boot-b"),
            law("node-a", NICS, 1, resource=NIC, boot="boot-b"),
            pods("node-a", [AFTER_TRAINING[0]], 1, boot="boot-b"),
        ],
    ),
    Step(
        "node-a's gpu-0 comes back with the plugin's registration",
        [law("node-a", GPU_1_UNHEALTHY, 2, boot="boot-b", plugin=PLUGIN)],
    ),
    Step("node-b's devices are all removed", [law("node-b", [], 4)]),
    Step(
        "the last repeats",
        [
            law("node-a", GPU_1_UNHEALTHY, 3, boot="boot-b", plugin=PLUGIN),
            law("node-b", [], 5),
            pods("node-a", [AFTER_TRAINING[0]], 2, boot="boot-b"),
        ],
        repeats=True,
    ),
]


@dataclass
class Route:
    """How a route is forced: `prepare` sets the service's switches once it runs; `media_type`
    is what the snapshots are posted as; `together` sends each step of repeats at once."""

    name: str
    database: str
    description: str
    connections: set[str]
    prepare: Callable[[SnapshotIngest], None] = lambda ingest: None
    media_type: str = "application/json"
    together: bool = False


def _worker_thread(ingest: SnapshotIngest) -> None:
    ingest.event_loop_database = None
    ingest.unchanged = None


def _event_loop(ingest: SnapshotIngest) -> None:
    ingest.unchanged = None
    ingest.drivers_connection = False


SQLITE = Route(
    "sqlite",
    "sqlite",
    "SQLite: every snapshot on the full path in a worker thread",
    {"sqlite"},
)
ROUTES = [
    SQLITE,
    Route(
        "worker_thread",
        "postgresql",
        "no event-loop database: every snapshot on the full path in a worker thread",
        {"engine"},
        _worker_thread,
    ),
    Route(
        "event_loop",
        "postgresql",
        "no unchanged statement, no driver's connection: the full path in the event loop",
        {"session"},
        _event_loop,
    ),
    Route(
        "unchanged_statement",
        "postgresql",
        # The early answer takes only a body posted as exactly application/json.
        "repeats by the unchanged statement, one at a time; changes on the driver's connection",
        {"driver", "session"},
        media_type="application/json; charset=utf-8",
    ),
    Route(
        "answered_early",
        "postgresql",
        "repeats answered early; changes on the driver's connection (the service's default)",
        {"driver", "session"},
    ),
    Route(
        "batched_unchanged",
        "postgresql",
        "a step's repeats at once: the first alone, the others in one batched statement",
        {"driver", "session"},
        together=True,
    ),
]


@dataclass
class Run:
    """What one sequence through one route left: the answers, the normalised tables, and the
    statements of each step."""

    answers: list[list[tuple[int, Json]]] = field(default_factory=list)
    stored: dict[str, list[Any]] = field(default_factory=dict)
    measured: list[Measured] = field(default_factory=list)


class StepTimes:
    """When each step ran: a timestamp the service wrote is compared as the step it was
    written in, the only way it legitimately differs between two runs."""

    def __init__(self) -> None:
        self.windows: list[tuple[datetime, datetime, str]] = []

    def label(self, value: datetime) -> str:
        for start, end, name in self.windows:
            if start <= value <= end:
                return f"during: {name}"
        return value.isoformat()  # from the snapshot itself

    def normalised(self, value: Any) -> Any:
        """`value` with every time in it, stored as such or as text in JSON, labelled."""
        if isinstance(value, datetime):
            return self.label(value)
        if isinstance(value, dict):
            return {key: self.normalised(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.normalised(item) for item in value]
        if isinstance(value, str) and ISO_TIME.match(value):
            return self.label(datetime.fromisoformat(value))
        return value


ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


# Not written by ingest: the caller's credential, the service's own state.
NOT_INGEST = {"api_tokens", "dashboard_sessions", "service_state"}


def stored_rows(session: Session, times: StepTimes) -> dict[str, list[Any]]:
    """Every ingest table's rows with ids replaced by what they name (a node's name, a
    device's node, resource and ID) and times by the step that wrote them. Events keep their
    order; other rows are sorted."""
    nodes: dict[int, str] = {
        node_id: name for node_id, name in session.execute(text("SELECT id, name FROM nodes"))
    }
    devices = {
        pk: (nodes[node_id], resource, device_id)
        for pk, node_id, resource, device_id in session.execute(
            text("SELECT id, node_id, resource, device_id FROM devices")
        )
    }
    dump: dict[str, list[Any]] = {}
    for table in Base.metadata.sorted_tables:
        if table.name in NOT_INGEST:
            continue
        order = list(table.primary_key.columns)
        rows = []
        for row in session.execute(select(table).order_by(*order)).mappings():
            values: list[tuple[str, Any]] = []
            for column in table.columns:
                value = row[column.name]
                targets = {key.column.table.name for key in column.foreign_keys}
                if column.primary_key and column.name == "id":
                    continue
                if value is not None and "nodes" in targets:
                    value = nodes[value]
                elif value is not None and ("devices" in targets or column.name == "device_pk"):
                    value = devices.get(value, "gone")
                else:
                    value = times.normalised(value)
                values.append((column.name, value))
            rows.append(tuple(values))
        dump[table.name] = rows if table.name == "events" else sorted(rows, key=repr)
    return dump


def _posted(client: TestClient, headers: dict[str, str], path: str, body: Json) -> tuple:
    response = client.post(path, content=json.dumps(body).encode(), headers=headers)
    return response.status_code, response.json()


def _apply_together(client: TestClient, step: Step) -> list[tuple[int, Json]]:
    """A step's repeats handed to the service's ingest at the same moment, in its event loop:
    the first one's statement goes alone and, while it is in flight, the others queue and go
    together as the next. The queueing happens before any answer can come back (each request
    reaches the queue without waiting for anything), so it does not depend on timing. Called
    as the route calls it, with what the route gives."""
    ingest = service_state(client.app).ingest  # type: ignore[arg-type]

    async def send() -> list[Json]:
        calls = []
        for path, body in step.snapshots:
            kind = ListAndWatchSnapshot if path == LAW else PodResourcesSnapshot
            calls.append(
                ingest.apply(
                    kind.model_validate(body),
                    actor=f"{TOKEN_NAME}@{body['node']}",
                    body_bytes=len(json.dumps(body)),
                    body_digest=repeat_digest(body),
                )
            )
        results = await asyncio.gather(*calls)
        return [
            IngestResponse.model_validate(r, from_attributes=True).model_dump() for r in results
        ]

    return [(200, answer) for answer in client.portal.call(send)]


def _warm_up(client: TestClient, headers: dict[str, str]) -> None:
    """The token checked and cached, and every pool's first connection made, before
    anything is counted: a connection's first use carries the engine's own setup queries."""
    assert client.get("/api/v1/nodes", headers=headers).status_code == 200
    database = service_state(client.app).event_loop_database  # type: ignore[arg-type]
    if database is None:
        return

    async def connect() -> None:
        await database.statements.wait()
        async with database.sessions() as session:
            await session.execute(text("SELECT 1"))

    client.portal.call(connect)


def run_route(route: Route, database_url: str, trace: DriverTrace) -> Run:
    engine = create_db_engine(database_url)
    with write_session(make_session_factory(engine)) as session:
        _, token = create_token(session, TOKEN_NAME, ["read", "ingest"], utcnow(), all_nodes=True)
    settings = Settings(
        database_url=database_url,
        auth=AuthMode.TOKEN,
        # No node goes stale between two steps, however slowly a busy machine runs them.
        stale_after=3600,
        # Checked once for the whole run: an expiry between two steps would add its lookup.
        token_cache_seconds=3600,
    )
    app = create_app(settings)
    app.state.background_starters.clear()  # their statements would land at any moment
    headers = {"Authorization": f"Bearer {token}", "Content-Type": route.media_type}
    run = Run()
    times = StepTimes()
    with TestClient(app) as client:
        _warm_up(client, headers)
        route.prepare(service_state(app).ingest)  # type: ignore[arg-type]
        for step in STEPS:
            started = utcnow()
            with trace.measure() as measured:
                if route.together and step.repeats:
                    answers = _apply_together(client, step)
                else:
                    answers = [_posted(client, headers, *snapshot) for snapshot in step.snapshots]
            times.windows.append((started, utcnow(), step.name))
            run.answers.append(answers)
            run.measured.append(measured)
    with make_session_factory(engine)() as session:
        run.stored = stored_rows(session, times)
    engine.dispose()
    return run


def _counts(route: Route, run: Run) -> list[Json]:
    counted: list[Json] = []
    for step, measured in zip(STEPS, run.measured, strict=True):
        entry: Json = {"step": step.name, "statements": measured.described()}
        if route.database == "postgresql":
            entry["round_trips"] = measured.round_trips
        counted.append(entry)
    return counted


def check_baseline(route: Route, run: Run) -> None:
    """The route's statements per step against statement_baseline.json, or, when rewriting,
    into it. Several test processes may rewrite at once: the file is locked meanwhile."""
    counted = _counts(route, run)
    with BASELINE.open("a+", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        content = file.read()
        baseline: dict[str, list[Json]] = json.loads(content) if content.strip() else {}
        if REWRITE:
            baseline[route.name] = counted
            file.seek(0)
            file.truncate()
            file.write(json.dumps(dict(sorted(baseline.items())), indent=1) + "\n")
            return
    expected = baseline.get(route.name)
    if expected == counted:
        return
    diff = difflib.unified_diff(
        json.dumps(expected, indent=1).splitlines(),
        json.dumps(counted, indent=1).splitlines(),
        f"{BASELINE.name}: {route.name}",
        "measured",
        lineterm="",
    )
    differing = [
        f"{entry['step']}:\n"
        + "\n".join(f"  {sent}: {' '.join(sent.sql.split())[:160]}" for sent in measured.statements)
        for entry, measured, before in zip(counted, run.measured, expected or [], strict=False)
        if entry != before
    ]
    pytest.fail(
        f"The statements the {route.name!r} route sends changed ({route.description}):\n"
        + "\n".join(diff)
        + "\nThe statements of the steps that differ:\n"
        + "\n".join(differing)
        + "\nIf the change is meant, rewrite the baseline with "
        "DEVICEDECK_REWRITE_STATEMENT_BASELINE=1 .venv/bin/pytest -p no:cacheprovider "
        "tests/core/test_ingest_routes.py",
        pytrace=False,
    )


@pytest.mark.parametrize(
    ("route", "database_url"),
    [pytest.param(route, route.database, id=route.name) for route in ROUTES],
    indirect=["database_url"],
)
def test_every_route_stores_what_sqlite_stores_at_its_pinned_cost(
    route: Route,
    database_url: str,
    sqlite_template: Path,
    tmp_path: Path,
    driver_trace: DriverTrace,
) -> None:
    trace = driver_trace
    run = run_route(route, database_url, trace)
    if route.database == "sqlite":
        reference = run
    else:
        reference_file = tmp_path / "reference.db"
        shutil.copy(sqlite_template, reference_file)
        reference = run_route(SQLITE, f"sqlite:///{reference_file}", trace)

    for step, answers, expected in zip(STEPS, run.answers, reference.answers, strict=True):
        assert answers == expected, step.name
    for table, rows in reference.stored.items():
        assert run.stored[table] == rows, table
    # The sequence did what it is for: new devices, flips, removals, holdings, refusals.
    assert {status for answers in run.answers for status, _ in answers} == {200, 409}
    kinds = {dict(row)["kind"] for row in run.stored["events"]}
    assert {"node_added", "device_added", "health_changed", "device_removed"} <= kinds
    assert {"device_reappeared", "allocated", "released", "plugin_registered"} <= kinds

    # The route forced is the one taken: each connection is one route's.
    sent_on = {sent.connection for measured in run.measured for sent in measured.statements}
    assert sent_on == route.connections, route.description
    if route.together:
        batched = [
            sent
            for step, measured in zip(STEPS, run.measured, strict=True)
            if step.repeats
            for sent in measured.statements
            if "WITH ORDINALITY" in sent.sql
        ]
        assert batched, "no repeats went together"
    check_baseline(route, run)
