"""The overview tells one story: its totals, "Needs attention", the DRA card and the charts'
"now" agree with each other and with the API, with unhealthy plugin and DRA devices, stale
nodes, devices of unknown health, removals and allocations, and still after a change."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.db import write_session
from devicedeck.inventory.models import Node
from devicedeck.kube import dra_sync

from .conftest import GPU, NIC, Ingest, dev, held
from .dom import Element, parse
from .overview_checks import check_one_picture, dra_card, read_overview

DRIVER = "gpu.example.com"
# Every region at once, as the live refresher asks for them (it sends no digests: all changed).
ALL_REGIONS = {"HX-Request": "true", "HX-Target": "live"}


def _claim(name: str, pool: str, device: str, ready: bool) -> dict[str, Any]:
    result = {"request": "gpu", "driver": DRIVER, "pool": pool, "device": device}
    return {
        "metadata": {"namespace": "ml", "name": name, "uid": f"uid-{name}"},
        "status": {
            "allocation": {"devices": {"results": [result]}},
            "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-pod-{name}"}],
            "devices": [
                {
                    "driver": DRIVER,
                    "pool": pool,
                    "device": device,
                    "conditions": [{"type": "Ready", "status": str(ready), "reason": "Checked"}],
                }
            ],
        },
    }


def dra_devices(factory: sessionmaker[Session], now: datetime) -> None:
    """What the cluster watcher stores: node-a's pool of two DRA GPUs, one held and broken,
    and a fabric pool every node can use, its one device held and broken."""
    slices = [
        {
            "metadata": {"name": "node-a-gpus"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "node-a",
                "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "dgpu-0"}, {"name": "dgpu-1"}],
            },
        },
        {
            "metadata": {"name": "fabric"},
            "spec": {
                "driver": DRIVER,
                "allNodes": True,
                "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "link-0"}],
            },
        },
    ]
    claims = [
        _claim("trainer-dra", "node-a", "dgpu-0", ready=False),
        _claim("fabric-user", "fabric", "link-0", ready=False),
    ]
    with write_session(factory) as session:
        dra_sync.apply_slice_list(session, slices, now)
        dra_sync.apply_claim_list(session, claims, now)


def troubled_cluster(ingest: Ingest, factory: sessionmaker[Session]) -> None:
    """node-a: a broken GPU, a GPU removed, two held; node-b: stale, having last reported a
    broken GPU; node-c: a NIC held that no plugin describes (health unknown); DRA devices."""
    gpus = [dev("gpu-0"), dev("gpu-1"), dev("gpu-2", "Unhealthy"), dev("gpu-3")]
    ingest.devices("node-a", gpus)
    ingest.devices("node-a", gpus[:3])
    ingest.devices("node-a", [dev("nic-0"), dev("nic-1")], resource=NIC)
    ingest.pods("node-a", [held("ml", "trainer-0", "main", GPU, "gpu-0", "gpu-1")])
    ingest.devices("node-b", [dev("gpu-0"), dev("gpu-1", "Unhealthy")])
    ingest.devices("node-c", [dev("nic-0")], resource=NIC)
    ingest.pods("node-c", [held("web", "proxy", "main", NIC, "nic-0", "nic-9")])
    with write_session(factory) as session:
        session.execute(
            update(Node).where(Node.name == "node-b").values(last_seen=utcnow().replace(year=2020))
        )
    dra_devices(factory, utcnow())


def _count(client: TestClient, auth: dict[str, str], path: str) -> int:
    response = client.get(path, headers=auth)
    assert response.status_code == 200, response.text
    count: int = response.json()["count"]
    return count


def _overview(client: TestClient, auth: dict[str, str]) -> Element:
    response = client.get("/", headers={**auth, **ALL_REGIONS})
    assert response.status_code == 200, response.text
    return parse(response.text)


def test_the_overview_tells_one_story(
    client: TestClient,
    auth: dict[str, str],
    ingest: Ingest,
    session_factory: sessionmaker[Session],
) -> None:
    troubled_cluster(ingest, session_factory)
    seen = read_overview(_overview(client, auth))
    check_one_picture(seen, charts=True)
    # The page and the API name the same devices.
    devices = "/api/v1/devices?health="
    assert seen.kpis["Unhealthy"][0] == 1 == _count(client, auth, devices + "Unhealthy")
    assert seen.kpis["Unknown"][0] == 3 == _count(client, auth, devices + "Unknown")
    assert seen.stale_nodes == ["node-b"]
    assert seen.unknown == {("node-b", GPU): 2, ("node-c", NIC): 1}
    assert dra_card(seen) == {
        "devices": _count(client, auth, "/api/v1/dra/devices"),
        "allocated": _count(client, auth, "/api/v1/dra/devices?allocated=true"),
        "free": 1,
        "unhealthy": _count(client, auth, "/api/v1/dra/devices?health=Unhealthy"),
    }
    # DRA devices of one node are that node's; the fabric, of every node, is its own place.
    assert seen.dra_unhealthy == {
        ("node-a", DRIVER, "node-a"): 1,
        (f"{DRIVER}/fabric", DRIVER, "fabric"): 1,
    }
    page = parse(client.get("/", headers=auth).text)
    stale_item = page.by_id("overview-problems").one("li", class_="attention-item is-stale")
    assert f"1 of {GPU} unhealthy when last seen" in stale_item.clean_text

    # A change after the charts were drawn (they are kept for a minute): the charts' "now",
    # the totals and the list all move together.
    ingest.devices("node-a", [dev("gpu-0", "Unhealthy"), dev("gpu-1"), dev("gpu-2", "Unhealthy")])
    ingest.pods("node-a", [held("ml", "trainer-0", "main", GPU, "gpu-0")])
    later = read_overview(_overview(client, auth))
    check_one_picture(later, charts=True)
    assert later.plugin_unhealthy[("node-a", GPU)] == 2
    assert later.chart_last[GPU] == (1, 1, 5)
