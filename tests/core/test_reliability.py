"""GET /api/v1/reliability/*: figures that match a hand count of a history seeded at known times.

The service's clock is set for each snapshot, so every change has a known time:

    hour  node-a gpu-0   node-a gpu-1   node-a gpu-2   node-b gpu-0   pods
    0     Healthy        Healthy        Healthy        Healthy        ml/train on a/gpu-0,
                                                                      serving/infer on a/gpu-1
    1     Unhealthy
    2     Healthy                                      Unhealthy
    3     Unhealthy
    3.5                                                               ml/train ends,
                                                                      ml/eval on a/gpu-0
    4     Healthy
    5                    removed
    6                                   Unhealthy
    8                                                  Healthy
    10    (now)
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.db import write_session
from devicedeck.inventory.models import Node

from .conftest import GPU, NIC, Api, dev, held, listandwatch, pod, podresources

T0 = datetime(2026, 11, 2, tzinfo=UTC)
HOUR = 3600.0
MODEL = "nvidia.com/gpu.product"


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def stamp(hours: float) -> str:
    return at(hours).isoformat()


SetClock = Callable[[float], None]


@pytest.fixture
def set_clock(monkeypatch: pytest.MonkeyPatch) -> SetClock:
    """The service's clock, for ingest and for queries, at T0 plus `hours`."""

    def set_to(hours: float) -> None:
        moment = at(hours)
        monkeypatch.setattr("devicedeck.inventory.write.ingest.utcnow", lambda: moment)
        monkeypatch.setattr("devicedeck.web.db_sessions.utcnow", lambda: moment)

    return set_to


def gpus(**health: str) -> list[dict[str, str]]:
    return [dev(name, state) for name, state in health.items()]


@pytest.fixture
def history(api: Api, set_clock: SetClock) -> dict[str, int]:
    """The table above; the ids of the devices by name."""
    seq = iter(range(1, 100))

    def node_a(hours: float, **health: str) -> None:
        set_clock(hours)
        devices = [dev(name.replace("_", "-"), state) for name, state in health.items()]
        api.ingest_listandwatch(listandwatch("node-a", devices, next(seq)))

    def node_b(hours: float, health: str) -> None:
        set_clock(hours)
        api.ingest_listandwatch(listandwatch("node-b", [dev("gpu-0", health)], next(seq)))

    node_a(0, gpu_0="Healthy", gpu_1="Healthy", gpu_2="Healthy")
    api.ingest_listandwatch(listandwatch("node-a", [dev("nic-0")], 1, resource=NIC))
    node_b(0, "Healthy")
    train = pod("train", containers={"main": [held(GPU, "gpu-0")]})
    infer = pod("infer", namespace="serving", containers={"main": [held(GPU, "gpu-1")]})
    api.ingest_podresources(podresources("node-a", [train, infer], 1))
    node_a(1, gpu_0="Unhealthy", gpu_1="Healthy", gpu_2="Healthy")
    node_a(2, gpu_0="Healthy", gpu_1="Healthy", gpu_2="Healthy")
    node_b(2, "Unhealthy")
    node_a(3, gpu_0="Unhealthy", gpu_1="Healthy", gpu_2="Healthy")
    set_clock(3.5)
    evaluation = pod("eval", containers={"main": [held(GPU, "gpu-0")]})
    api.ingest_podresources(podresources("node-a", [evaluation, infer], 2))
    node_a(4, gpu_0="Healthy", gpu_1="Healthy", gpu_2="Healthy")
    node_a(5, gpu_0="Healthy", gpu_2="Healthy")
    node_a(6, gpu_0="Healthy", gpu_2="Unhealthy")
    node_b(8, "Healthy")
    set_clock(10)
    ids = {}
    for device in api.devices(state="any"):
        ids[f"{device['node']}/{device['device_id']}"] = device["id"]
    return ids


def ranked(api: Api, **params: object) -> list[dict]:
    return api.all_pages("/api/v1/reliability/devices", **params)


def by_name(rows: list[dict]) -> dict[str, dict]:
    return {f"{r['node']}/{r['device_id']}": r for r in rows}


WHOLE = {"since": stamp(0), "until": stamp(10)}


def test_figures_match_a_hand_count(api: Api, history: dict[str, int]) -> None:
    rows = by_name(ranked(api, **WHOLE))
    # nic-0 never failed nor left: it has nothing to rank.
    assert sorted(rows) == ["node-a/gpu-0", "node-a/gpu-1", "node-a/gpu-2", "node-b/gpu-0"]
    flapping = rows["node-a/gpu-0"]
    assert flapping["id"] == history["node-a/gpu-0"]
    assert flapping["failures"] == 2
    assert flapping["unhealthy_seconds"] == 2 * HOUR
    assert flapping["unhealthy_share"] == pytest.approx(0.2)
    assert flapping["mtbf_seconds"] == (10 - 2) * HOUR / 2
    assert flapping["removals"] == 0
    # train held it through the first spell and half the second; eval took it while sick.
    assert flapping["pods_hit_names"] == ["ml/eval", "ml/train"]
    assert flapping["pods_hit"] == 2 and flapping["pods_held"] == 2

    unplugged = rows["node-a/gpu-1"]
    assert (unplugged["failures"], unplugged["removals"]) == (0, 1)
    assert unplugged["mtbf_seconds"] is None and unplugged["unhealthy_seconds"] == 0
    assert (unplugged["pods_hit"], unplugged["pods_held"]) == (0, 1)

    # Still unhealthy at the window's end: counted up to it.
    assert rows["node-a/gpu-2"]["unhealthy_seconds"] == 4 * HOUR
    assert rows["node-b/gpu-0"]["unhealthy_seconds"] == 6 * HOUR
    assert rows["node-b/gpu-0"]["failures"] == 1


def test_a_named_window_ends_now(api: Api, history: dict[str, int]) -> None:
    day = by_name(ranked(api, window="24h"))
    # The devices were first seen at hour 0: the 24 hours before it do not count as healthy.
    assert day == by_name(ranked(api, **WHOLE))
    assert day["node-a/gpu-0"]["unhealthy_share"] == pytest.approx(0.2)


def test_window_edges_cut_the_spells(api: Api, history: dict[str, int]) -> None:
    rows = by_name(ranked(api, since=stamp(1.5), until=stamp(3.5)))
    # gpu-1 left and gpu-2 failed after this window.
    assert sorted(rows) == ["node-a/gpu-0", "node-b/gpu-0"]
    gpu_0 = rows["node-a/gpu-0"]
    # The spell from hour 1 began before the window: its last half hour counts, not its start.
    assert gpu_0["failures"] == 1
    assert gpu_0["unhealthy_seconds"] == HOUR
    assert gpu_0["mtbf_seconds"] == HOUR
    # eval took the device at hour 3.5, the window's end: outside it.
    assert gpu_0["pods_hit_names"] == ["ml/train"]
    assert rows["node-b/gpu-0"]["unhealthy_seconds"] == 1.5 * HOUR
    assert rows["node-b/gpu-0"]["failures"] == 1
    # A window that ends before a spell begins has none of it.
    assert ranked(api, since=stamp(0), until=stamp(1)) == []


def test_filters(api: Api, history: dict[str, int]) -> None:
    def names(**filters: object) -> list[str]:
        return sorted(by_name(ranked(api, **WHOLE, **filters)))

    assert names(node="node-b") == ["node-b/gpu-0"]
    assert names(node_prefix="node-a") == ["node-a/gpu-0", "node-a/gpu-1", "node-a/gpu-2"]
    assert names(resource=NIC) == []
    assert names(namespace="serving") == ["node-a/gpu-1"]
    assert names(namespace="ml") == ["node-a/gpu-0"]


def test_sorts_and_keyset_pages(api: Api, history: dict[str, int]) -> None:
    worst = ranked(api, **WHOLE)
    # Most failures first, ties by id.
    assert [r["failures"] for r in worst] == [2, 1, 1, 0]
    assert worst[0]["id"] == history["node-a/gpu-0"]
    assert worst[1]["id"] < worst[2]["id"]
    longest = ranked(api, **WHOLE, sort="-unhealthy_seconds")
    assert [r["unhealthy_seconds"] / HOUR for r in longest] == [6, 4, 2, 0]
    assert [r["device_id"] for r in ranked(api, **WHOLE, sort="pods_hit")][-1] == "gpu-0"
    # mtbf: a device that never failed sorts as the longest.
    assert ranked(api, **WHOLE, sort="-mtbf_seconds")[0]["device_id"] == "gpu-1"
    for sort in ("-failures", "unhealthy_share", "-removals", "mtbf_seconds", "-pods_held"):
        whole = ranked(api, **WHOLE, sort=sort, limit=1000)
        paged = ranked(api, **WHOLE, sort=sort, limit=1)
        assert paged == whole, sort
    first = api.get("/api/v1/reliability/devices", **WHOLE, limit=2)
    assert first["count"] == 4 and first["next"]


def test_pod_figures_count_each_pod_once(api: Api, set_clock: SetClock) -> None:
    """The ranking sorts by pods hit as each row counts them: a pod hit in three spells is one
    pod, so gpu-0 (one pod, three spells) ranks below gpu-1 (two pods, one spell)."""
    seq = iter(range(1, 100))

    def health(hours: float, gpu_0: str, gpu_1: str) -> None:
        set_clock(hours)
        devices = [dev("gpu-0", gpu_0), dev("gpu-1", gpu_1)]
        api.ingest_listandwatch(listandwatch("node-c", devices, next(seq)))

    def pods(hours: float, second: str) -> None:
        set_clock(hours)
        solo = pod("solo", containers={"main": [held(GPU, "gpu-0")]})
        other = pod(second, namespace="batch", containers={"main": [held(GPU, "gpu-1")]})
        api.ingest_podresources(podresources("node-c", [solo, other], next(seq)))

    health(0, "Healthy", "Healthy")
    pods(0, "first")
    health(1, "Unhealthy", "Unhealthy")
    health(1.2, "Healthy", "Unhealthy")
    pods(1.5, "second")
    health(2, "Unhealthy", "Unhealthy")
    health(2.2, "Healthy", "Unhealthy")
    health(2.5, "Unhealthy", "Unhealthy")
    health(2.8, "Healthy", "Healthy")
    set_clock(10)
    window = {"since": stamp(0), "until": stamp(10)}
    most_hit = ranked(api, **window, sort="-pods_hit", limit=1)
    assert [(r["device_id"], r["pods_hit"]) for r in most_hit] == [("gpu-1", 2), ("gpu-0", 1)]
    assert most_hit[0]["pods_hit_names"] == ["batch/first", "batch/second"]
    assert [r["device_id"] for r in ranked(api, **window, sort="pods_hit")] == ["gpu-0", "gpu-1"]
    assert [r["device_id"] for r in ranked(api, **window, sort="-pods_held")] == ["gpu-1", "gpu-0"]
    # The window from 1.9 h: gpu-1 was held only by `second` since, gpu-0 by `solo`.
    late = ranked(api, since=stamp(1.9), until=stamp(10), sort="-pods_hit")
    assert [(r["device_id"], r["pods_hit"], r["pods_held"]) for r in late] == [
        ("gpu-0", 1, 1),
        ("gpu-1", 1, 1),
    ]
    batch = api.all_pages("/api/v1/reliability/nodes", **window, namespace="batch")
    assert [(n["node"], n["devices"], n["failures"], n["pods_hit"]) for n in batch] == [
        ("node-c", 1, 1, 2)
    ]


def test_every_sort_orders_by_the_figure_each_row_shows(api: Api, history: dict[str, int]) -> None:
    for figure in (
        "failures",
        "unhealthy_seconds",
        "unhealthy_share",
        "removals",
        "pods_hit",
        "pods_held",
    ):
        for descending in (False, True):
            sort = f"-{figure}" if descending else figure
            values = [r[figure] for r in ranked(api, **WHOLE, sort=sort, limit=1)]
            assert values == sorted(values, reverse=descending), sort


def test_per_node_and_per_resource(api: Api, history: dict[str, int]) -> None:
    nodes = api.all_pages("/api/v1/reliability/nodes", **WHOLE)
    assert nodes == [
        {
            "node": "node-a",
            "devices": 3,
            "failures": 3,
            "unhealthy_seconds": 6 * HOUR,
            "removals": 1,
            "pods_hit": 2,
        },
        {
            "node": "node-b",
            "devices": 1,
            "failures": 1,
            "unhealthy_seconds": 6 * HOUR,
            "removals": 0,
            "pods_hit": 0,
        },
    ]
    paged = api.all_pages("/api/v1/reliability/nodes", **WHOLE, sort="-unhealthy_seconds", limit=1)
    assert [n["node"] for n in paged] == ["node-a", "node-b"]
    resources = api.all_pages("/api/v1/reliability/resources", **WHOLE)
    assert resources == [
        {
            "resource": GPU,
            "devices": 4,
            "failures": 4,
            "unhealthy_seconds": 12 * HOUR,
            "removals": 1,
            "pods_hit": 2,
        }
    ]


def test_per_node_label(
    api: Api, history: dict[str, int], session_factory: sessionmaker[Session]
) -> None:
    """Grouped by the GPU model the nodes' labels name; a node without the label is "" ."""
    with write_session(session_factory) as session:
        session.execute(
            update(Node).where(Node.name == "node-a").values(labels={MODEL: "H100", "x": "y"})
        )
    rows = api.all_pages("/api/v1/reliability/labels", **WHOLE, label=MODEL, limit=1)
    assert rows == [
        {
            "label": MODEL,
            "value": "H100",
            "nodes": 1,
            "devices": 3,
            "failures": 3,
            "unhealthy_seconds": 6 * HOUR,
            "removals": 1,
            "pods_hit": 2,
        },
        {
            "label": MODEL,
            "value": "",
            "nodes": 1,
            "devices": 1,
            "failures": 1,
            "unhealthy_seconds": 6 * HOUR,
            "removals": 0,
            "pods_hit": 0,
        },
    ]
    answer = api.get("/api/v1/reliability/labels", 422, label="has space")
    assert answer["error"]["details"][0]["field"] == "label"


def test_csv_has_every_row(api: Api, history: dict[str, int]) -> None:
    response = api.client.get(
        "/api/v1/reliability/devices",
        params={**WHOLE, "format": "csv", "sort": "-unhealthy_seconds"},
        headers=api.headers,
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert [(r["node"], r["device_id"], r["unhealthy_seconds"]) for r in rows] == [
        ("node-b", "gpu-0", "21600.0"),
        ("node-a", "gpu-2", "14400.0"),
        ("node-a", "gpu-0", "7200.0"),
        ("node-a", "gpu-1", "0.0"),
    ]
    assert rows[2]["pods_hit_names"] == '["ml/eval","ml/train"]'
    nodes = api.client.get(
        "/api/v1/reliability/nodes", params={**WHOLE, "format": "csv"}, headers=api.headers
    )
    assert nodes.text.splitlines()[0] == "node,devices,failures,unhealthy_seconds,removals,pods_hit"


def test_one_device(api: Api, history: dict[str, int]) -> None:
    nic = api.devices(resource=NIC)[0]
    quiet = api.get(f"/api/v1/reliability/devices/{nic['id']}", **WHOLE)
    assert quiet["failures"] == 0 and quiet["pods_held"] == 0
    assert quiet["window"] == {"name": None, "since": stamp(0), "until": stamp(10)}
    sick = api.get(f"/api/v1/reliability/devices/{history['node-a/gpu-0']}", window="7d")
    assert sick["failures"] == 2 and sick["window"]["name"] == "7d"
    assert sick["window"]["until"] == stamp(10)
    api.get("/api/v1/reliability/devices/999999", 404)


@pytest.mark.parametrize(
    ("params", "field", "rule"),
    [
        ({"window": "3d"}, "window", "enum"),
        ({"window": "7d", "since": stamp(0)}, "window", "exclusive"),
        ({"since": stamp(5), "until": stamp(4)}, "since", "before_until"),
        ({"until": stamp(4)}, "since", "required"),
        ({"since": "2026-11-02T00:00:00"}, "since", "timezone_aware"),
        ({"since": stamp(-24 * 400), "until": stamp(0)}, "since", "range"),
        ({"sort": "color"}, "sort", "enum"),
        ({"cursor": "bm90LWEtY3Vyc29y"}, "cursor", "cursor"),
    ],
)
def test_bad_parameters_name_the_field_and_rule(
    api: Api, params: dict[str, str], field: str, rule: str
) -> None:
    answer = api.get("/api/v1/reliability/devices", 422, **params)
    assert {"field": field, "rule": rule} in [
        {"field": p["field"], "rule": p["rule"]} for p in answer["error"]["details"]
    ], answer
