"""Every DRA device page renders, for every kind of DRA device a cluster can hold, and says what
the JSON API says about the device. The pages are found as a person finds them: by following
links from the DRA tab, the node pages and the pod pages."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from fastapi.testclient import TestClient
from ui.dom import Element, parse

from devicedeck.clock import utcnow
from devicedeck.sim.dra_driver import DraDriverSpec, SimDraDriver
from devicedeck.sim.kubeclient import KubeClient

from .conftest import StartApp, wait_for
from .dra_builders import DRIVER, claim_object, device, dra_pod, result, selector, slice_object
from .fake_apiserver import FakeApiServer
from .objects import node

SIM_DRIVER = "gpu.sim.devicedeck.dev"
NODES = ("gpu-a", "node-b", "node-c")
PODS = ("ml/trainer-gpu-a", "ml/inference-gpu-a", "ml/old-job", "serving/share-a")
SHARE = "6a1e4c8e-0000-4000-8000-00000000000"


def _share_claim(name: str, index: int, memory: str) -> dict[str, Any]:
    claim = claim_object(
        "serving",
        name,
        [
            result(
                "gpu-s0",
                pool="node-b",
                shareID=f"{SHARE}{index}",
                consumedCapacity={f"{DRIVER}/memory": memory, "cores": "25"},
            )
        ],
        reserved_for=[(name, f"uid-{name}")],
        # A condition without a reason: only type and status are required to show it.
        devices_status=[
            {
                "driver": DRIVER,
                "pool": "node-b",
                "device": "gpu-s0",
                "shareID": f"{SHARE}{index}",
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        ],
    )
    return claim


def build_cluster(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    """Each kind of DRA device: the simulated driver's (a template claim, a broken GPU, an
    admin-access monitor, capacity on every device), shared devices with consumed capacity,
    a pool published for every node and still incomplete (its name has a slash), devices of a
    node selector and of per-device node selection, and a device its driver stops publishing."""
    fake_api.put("nodes", node("gpu-a", capacity={}, labels={"rack": "r1"}))
    fake_api.put("nodes", node("node-b", capacity={}, labels={"rack": "r1"}))
    fake_api.put("nodes", node("node-c", capacity={}, labels={"rack": "r2"}))
    SimDraDriver(KubeClient.from_kubeconfig(kubeconfig), DraDriverSpec("gpu-a", 4)).publish()
    fake_api.put(
        "resourceslices",
        slice_object(
            "node-b-shared",
            [
                device(
                    "gpu-s0",
                    allowMultipleAllocations=True,
                    capacity={"memory": {"value": "80Gi"}, "cores": {"value": "100"}},
                    # A taint needs no value.
                    taints=[{"key": "example.com/maintenance", "effect": "NoSchedule"}],
                ),
                device("gpu-s1", allowMultipleAllocations=True, capacity={"memory": "80Gi"}),
            ],
            pool="node-b",
            nodeName="node-b",
        ),
    )
    fake_api.put("resourceclaims", _share_claim("share-a", 1, "16Gi"))
    fake_api.put("resourceclaims", _share_claim("share-b", 2, "24Gi"))
    fake_api.put(
        "pods",
        dra_pod(
            "serving",
            "share-a",
            node_name="node-b",
            uid="uid-share-a",
            claims=[{"name": "gpu", "resourceClaimName": "share-a"}],
        ),
    )
    fake_api.put(
        "resourceslices",
        slice_object(
            "fabric-1", [device("fabric-0"), device("fabric-1")], pool="racks/r1", count=2,
            allNodes=True,
        ),
    )  # fmt: skip
    fake_api.put(
        "resourceslices",
        slice_object(
            "nics", [device("nic-0")], pool="nics", nodeSelector=selector("rack", "In", "r1")
        ),
    )
    fake_api.put(
        "resourceslices",
        slice_object(
            "accels",
            [device("accel-0", nodeName="node-c"), device("accel-1", allNodes=True)],
            pool="accels",
            perDeviceNodeSelection=True,
        ),
    )
    fake_api.put(
        "resourceslices",
        slice_object("node-b-old", [device("old-0")], pool="node-b-old", nodeName="node-b"),
    )
    fake_api.put(
        "resourceclaims",
        claim_object(
            "ml",
            "old-job-gpu",
            [result("old-0", pool="node-b-old")],
            reserved_for=[("old-job", "uid-old-job")],
            devices_status=[
                {
                    "driver": DRIVER,
                    "pool": "node-b-old",
                    "device": "old-0",
                    "conditions": [{"type": "Ready", "status": "False", "reason": "Retired"}],
                }
            ],
        ),
    )
    fake_api.put(
        "pods",
        dra_pod(
            "ml",
            "old-job",
            node_name="node-b",
            uid="uid-old-job",
            claims=[{"name": "gpu", "resourceClaimName": "old-job-gpu"}],
        ),
    )


def _holdings(client: TestClient, auth: dict[str, str]) -> None:
    """gpu-a's agent reports the trainer holding gpu-0 through its claim: allocation history."""
    snapshot = {
        "node": "gpu-a",
        "source": {"boot_id": "boot-1", "seq": 1},
        "observed_at": utcnow().isoformat(),
        "pod_resources": [
            {
                "namespace": "ml",
                "name": "trainer-gpu-a",
                "containers": [
                    {
                        "name": "main",
                        "dynamic_resources": [
                            {
                                "claim_name": "trainer-gpu-a-gpu-sim01",
                                "claim_namespace": "ml",
                                "claim_resources": [
                                    {
                                        "cdi_devices": [],
                                        "driver_name": SIM_DRIVER,
                                        "pool_name": "gpu-a",
                                        "device_name": "gpu-0",
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        ],
    }
    response = client.post("/api/v1/ingest/podresources", json=snapshot, headers=auth)
    assert response.status_code == 200, response.text


def _health_stream(client: TestClient, token: str) -> None:
    """node-b's agent reads its driver's health stream: one device healthy, one the driver
    cannot tell (UNKNOWN, which the printer leaves out)."""
    report = {
        "node": "node-b",
        "driver": DRIVER,
        "observed_at": utcnow().isoformat(),
        "devices": [
            {"device": {"poolName": "node-b", "deviceName": "gpu-s0"}, "health": "HEALTHY"},
            {"device": {"poolName": "node-b", "deviceName": "gpu-s1"}},
        ],
    }
    response = client.post(
        "/api/v1/ingest/dra-health", json=report, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200, response.text


def _api(client: TestClient, auth: dict[str, str], path: str) -> Any:
    response = client.get(path, headers=auth)
    assert response.status_code == 200, (path, response.text)
    return response.json()


def _page(client: TestClient, auth: dict[str, str], path: str) -> Element:
    response = client.get(path, headers=auth)
    assert response.status_code == 200, (path, response.status_code, response.text[:1000])
    assert response.headers["content-type"].startswith("text/html"), path
    return parse(response.text)


def _dra_links(page: Element) -> set[str]:
    return {
        a.attrs["href"]
        for a in page.find_all("a")
        if a.attrs.get("href", "").startswith("/dra/devices/")
    }


def _key(href: str) -> tuple[str, str, str]:
    driver, pool, device_name = href.removeprefix("/dra/devices/").split("/")
    return unquote(driver), unquote(pool), unquote(device_name)


def _section(page: Element, heading: str) -> Element:
    """The card (<section>) whose heading this is."""
    (title,) = [h for h in page.find_all("h2") if h.clean_text == heading]
    card: Element | None = title
    while card is not None and card.tag != "section":
        card = card.parent
    assert card is not None, heading
    return card


def _terms(card: Element) -> dict[str, str]:
    """A card's description list: each term's text and its description's."""
    terms: dict[str, str] = {}
    term = None
    for element in card.one("dl").children:
        if isinstance(element, Element) and element.tag == "dt":
            term = element.clean_text
        elif isinstance(element, Element) and element.tag == "dd" and term is not None:
            terms[term] = element.clean_text
    return terms


def check_page_agrees(page: Element, api: dict[str, Any]) -> None:
    """The page says what the JSON route says: health, published or not, the pool's state,
    holders and their shares, watchers, the capacity left, and both histories."""
    title = page.one("h1").clean_text
    assert title.startswith(api["device"]), title
    health = api["health"]["health"] if api["health"] else "not reported"
    assert title.endswith(health), (title, health)
    sub = page.one("p", class_="page-sub").clean_text
    current = api["current"]
    assert ("no longer published" in sub) == (current is None), sub
    held_by = _section(page, "Held by").clean_text
    if current is None:
        assert "No claim holds it." in held_by
    else:
        assert ("incomplete pool" in sub) == (not current["pool_state"]["complete"]), sub
        for claim in current["claims"]:
            assert f"claim {claim['namespace']}/{claim['name']}" in held_by
            for consumer in claim["consumers"]:
                assert f"{consumer['namespace']}/{consumer['name']}" in held_by
            if claim["share_id"]:
                assert claim["share_id"] in held_by
        if not current["claims"]:
            assert "free for the next claim" in held_by
        for watcher in current["watched_by"]:
            assert f"{watcher['namespace']}/{watcher['name']}" in held_by
        values = _terms(_section(page, "Now"))
        for name, capacity in current["capacity"].items():
            text = values[name]
            assert capacity["value"] in text
            if capacity["available"] is not None:
                assert f"{capacity['consumed']} consumed, {capacity['available']} left" in text
    if api["health_stream"]:
        assert "Health stream" in _section(page, "Now").clean_text
    rows = _section(page, "Allocation history").find_all("tr")
    assert len(rows) == (len(api["allocation_history"]) + 1 if api["allocation_history"] else 0)
    changes = _section(page, "Health changes").find_all("li")
    assert len(changes) == len(api["health_history"])


def test_every_dra_device_page_renders_and_agrees_with_the_api(
    fake_api: FakeApiServer,
    kubeconfig: Path,
    start_app: StartApp,
    auth: dict[str, str],
    make_token: Callable[..., str],
) -> None:
    build_cluster(fake_api, kubeconfig)
    client = start_app()
    wait_for(
        lambda: (
            _api(client, auth, "/api/v1/dra/devices")["count"] == 12
            and _api(client, auth, "/api/v1/dra/devices?allocated=true")["count"] == 4
        ),
        what="every slice and claim",
    )
    _holdings(client, auth)
    _health_stream(client, make_token("ingest", name="agent-b", node="node-b"))
    # The driver stops publishing old-0; its health and its claim are still known.
    fake_api.delete("resourceslices", "node-b-old")
    old = f"/api/v1/dra/drivers/{DRIVER}/pools/node-b-old/devices/old-0"
    wait_for(lambda: _api(client, auth, old)["current"] is None, what="old-0 unpublished")

    listing = _page(client, auth, "/dra")
    links = _dra_links(listing)
    assert len(links) == _api(client, auth, "/api/v1/dra/devices")["count"] == 11
    for name in NODES:
        node_page = _page(client, auth, f"/nodes/{name}")
        tiles = _dra_links(node_page)
        on_node = _api(client, auth, f"/api/v1/dra/devices?node={name}")["results"]
        assert {_key(href) for href in tiles} == {
            (d["driver"], d["pool"], d["device"]) for d in on_node
        }, name
        links |= tiles
    for pod in PODS:
        # Pods come through a watch of their own.
        links |= wait_for(
            lambda pod=pod: _dra_links(_page(client, auth, f"/pods/{pod}")),
            what=f"the DRA devices on {pod}'s page",
        )
    assert f"/dra/devices/{DRIVER}/node-b-old/old-0" in links

    kinds = set()
    for href in sorted(links):
        driver, pool, name = _key(href)
        api = _api(client, auth, f"/api/v1/dra/drivers/{driver}/pools/{pool}/devices/{name}")
        check_page_agrees(_page(client, auth, href), api)
        current = api["current"] or {}
        kinds |= {
            "unpublished" if not current else "published",
            "shared" if current.get("shared") else "whole",
            "watched" if current.get("watched_by") else "unwatched",
            "incomplete pool" if current and not current["pool_state"]["complete"] else "",
            "health stream" if api["health_stream"] else "",
            f"health {(api['health'] or {}).get('health', 'none')}",
            "held before" if api["allocation_history"] else "",
        }
    assert kinds >= {
        "unpublished",
        "published",
        "shared",
        "whole",
        "watched",
        "unwatched",
        "incomplete pool",
        "health stream",
        "health Healthy",
        "health Unhealthy",
        "health Unknown",
        "health none",
        "held before",
    }, kinds
