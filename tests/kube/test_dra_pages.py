"""The dashboard's DRA pages: the DRA tab of the devices list, a DRA device's page, DRA pools
on the node page and the overview's DRA count, from the API server through the watcher."""

from __future__ import annotations

from fastapi.testclient import TestClient
from ui.dom import Element, parse

from .conftest import StartApp, wait_for
from .dra_builders import DRIVER, claim_object, device, dra_pod, result, slice_object
from .fake_apiserver import FakeApiServer
from .objects import node


def _dom(client: TestClient, auth: dict[str, str], path: str, expect: int = 200) -> Element:
    response = client.get(path, headers=auth)
    assert response.status_code == expect, response.text[:2000]
    return parse(response.text)


def _rows(page: Element) -> dict[str, str]:
    """Device name -> the row's text, from the DRA devices table."""
    rows = {}
    for row in page.find_all("tr"):
        header = row.find("th", scope="row")
        if header is not None:
            rows[header.clean_text.split()[0]] = row.clean_text
    return rows


def test_dra_pages_show_devices_holders_health_and_pools(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    fake_api.put("nodes", node("node-a", capacity={}))
    fake_api.put(
        "resourceslices",
        slice_object(
            "node-a-gpus", [device("gpu-0"), device("gpu-1")], pool="node-a", nodeName="node-a"
        ),
    )
    # One of the two slices the rack pool should have.
    fake_api.put(
        "resourceslices",
        slice_object("rack-a", [device("fabric-0")], pool="rack", count=2, allNodes=True),
    )
    fake_api.put(
        "resourceclaims",
        claim_object(
            "ml",
            "trainer-0-gpu",
            [result("gpu-0", pool="node-a")],
            reserved_for=[("trainer-0", "uid-trainer-0")],
            devices_status=[
                {
                    "driver": DRIVER,
                    "pool": "node-a",
                    "device": "gpu-0",
                    "conditions": [{"type": "Ready", "status": "False", "reason": "XidError"}],
                }
            ],
        ),
    )
    fake_api.put(
        "resourceclaims",
        claim_object(
            "monitoring", "dcgm-node-a", [result("gpu-1", pool="node-a", adminAccess=True)]
        ),
    )
    fake_api.put(
        "pods",
        dra_pod(
            "ml",
            "trainer-0",
            node_name="node-a",
            uid="uid-trainer-0",
            claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            generated={"gpu": "trainer-0-gpu"},
        ),
    )
    client = start_app()
    listing = wait_for(
        lambda: (
            (d := _dom(client, auth, "/dra"))
            and "Unhealthy" in _rows(d).get("gpu-0", "")
            and "dcgm-node-a" in _rows(d).get("gpu-1", "")
            and d
        ),
        what="the DRA list with gpu-0's holder and health",
    )
    rows = _rows(listing)
    assert set(rows) == {"gpu-0", "gpu-1", "fabric-0"}
    assert "ml/trainer-0" in rows["gpu-0"]
    assert "free" in rows["gpu-1"] and "admin access" in rows["gpu-1"]
    assert "incomplete pool" in rows["fabric-0"]
    assert "every node" in rows["fabric-0"]
    tabs = listing.one("nav", **{"aria-label": "Kinds of device"})
    assert tabs.one("a", **{"aria-current": "page"}).clean_text == "DRA (ResourceSlices)"
    assert set(_rows(_dom(client, auth, "/dra?allocated=yes"))) == {"gpu-0"}
    assert set(_rows(_dom(client, auth, "/dra?health=Unhealthy"))) == {"gpu-0"}
    _dom(client, auth, "/dra?health=Broken", expect=422)
    assert set(_rows(_dom(client, auth, "/dra?driver=nobody.example.com"))) == set()

    # The device's own page: health with its source, the holder, the health history.
    link = next(a for a in listing.find_all("a") if a.clean_text == "gpu-0" and "href" in a.attrs)
    assert link.attrs["href"] == f"/dra/devices/{DRIVER}/node-a/gpu-0"
    page = _dom(client, auth, link.attrs["href"])
    assert "gpu-0" in page.one("h1").clean_text
    assert "Unhealthy" in page.one("h1").clean_text
    text = page.clean_text
    assert "the driver, in the claim\N{RIGHT SINGLE QUOTATION MARK}s device status" in text
    assert "ml/trainer-0" in text
    history = page.by_id("dra-health-title").parent
    assert history is not None and len(history.parent.find_all("li")) == 1  # type: ignore[union-attr]
    _dom(client, auth, f"/dra/devices/{DRIVER}/node-a/gpu-9", expect=404)

    # The node page groups the node's DRA devices by driver and pool, the rack's included.
    node_page = _dom(client, auth, "/nodes/node-a")
    headings = [h.clean_text for h in node_page.find_all("h2") if "pool" in h.clean_text]
    assert headings == [f"{DRIVER} pool node-a", f"{DRIVER} pool rack"]
    tiles = [t.clean_text for t in node_page.find_all("li") if t.has_class("tile")]
    assert any(t.startswith("gpu-0") and "Unhealthy" in t for t in tiles)
    assert any(t.startswith("fabric-0") for t in tiles)

    # The overview counts DRA devices too.
    overview = _dom(client, auth, "/")
    kpi = next(a for a in overview.find_all("a") if a.attrs.get("href") == "/dra")
    assert "DRA devices 3" in kpi.clean_text
    assert "1 allocated" in kpi.clean_text and "1 unhealthy" in kpi.clean_text

    # The pod's page: known from the API server alone, with its claim and device.
    pod_page = wait_for(
        lambda: (d := _dom(client, auth, "/pods/ml/trainer-0")) and "gpu-0" in d.clean_text and d,
        what="the pod page's DRA devices",
    )
    section = pod_page.by_id("pod-dra-title").parent
    assert section is not None and section.parent is not None
    (row,) = [r for r in section.parent.find_all("tr") if r.find("th", scope="row")]
    assert row.clean_text.startswith("gpu trainer-0-gpu from template one-gpu gpu-0")
    assert "Unhealthy" in row.clean_text
    assert row.one("a").attrs["href"] == f"/dra/devices/{DRIVER}/node-a/gpu-0"
