"""Every page with no data, with typical data, and with hostile data."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.db import write_session
from devicedeck.inventory.models import Allocation, Device, Node
from devicedeck.inventory.read.overview import NODE_REMOVED_TILE_LIMIT, NODE_TILE_LIMIT

from .conftest import GPU, NIC, Ingest, Pages, dev, held, typical_cluster
from .dom import Element, parse

LIST_PAGES = ["/", "/nodes", "/devices", "/pods", "/events"]


def row_texts(table: Element) -> list[str]:
    body = table.one("tbody")
    return [row.clean_text for row in body.find_all("tr")]


def tile_ids(container: Element) -> list[str]:
    return [tile.one("span", class_="tile-id mono").text for tile in container.find_all("li")]


def device_pk(factory: sessionmaker[Session], node: str, device_id: str) -> int:
    with factory() as session:
        pk = session.scalar(
            select(Device.id)
            .join(Node, Node.id == Device.node_id)
            .where(Node.name == node, Device.device_id == device_id)
        )
    assert pk is not None
    return pk


def test_pages_render_with_no_data(pages: Pages) -> None:
    for path in LIST_PAGES:
        page = pages.dom(path)
        assert page.one("main")
        nav = page.one("nav", aria_label="Main")
        current = nav.find_all("a", aria_current="page")
        assert len(current) == 1 and current[0].attrs["href"] == path
        # Every page says plainly that there is nothing yet, rather than an empty table.
        assert page.find_all(predicate=lambda e: e.has_class("empty")), path


def test_overview_shows_totals_problems_and_events(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    page = pages.dom("/")
    kpis = {
        kpi.one("span", class_="kpi-label").text: kpi.one("span", class_="kpi-value").text
        for kpi in page.find_all("a", predicate=lambda e: e.has_class("kpi"))
    }
    assert kpis == {
        "Nodes": "2",
        "Devices": "8",
        "Healthy": "7",
        "Unhealthy": "1",
        "Unknown": "0",
        "Allocated": "3",
    }
    resources = row_texts(page.by_id("overview-resources").one("table"))
    # resource, nodes, devices, healthy, unhealthy, unknown, allocated, free, utilisation
    assert resources[0].startswith(f"{GPU} 2 6 5 1 0 3 2 50%"), resources
    assert resources[1].startswith(f"{NIC} 1 2 2 0 0 0 2 0%"), resources
    attention = page.by_id("overview-problems").clean_text
    assert "node-a" in attention and "1 unhealthy" in attention
    assert "node-b" not in attention
    feed = page.by_id("overview-events").find_all(
        "li", predicate=lambda e: "data-event-id" in e.attrs
    )
    assert feed and "Allocated" in feed[0].clean_text


def test_nodes_table_counts_per_resource_and_marks_stale(
    pages: Pages, ingest: Ingest, session_factory: sessionmaker[Session]
) -> None:
    typical_cluster(ingest)
    with write_session(session_factory) as session:
        session.execute(
            update(Node).where(Node.name == "node-b").values(last_seen=utcnow().replace(year=2020))
        )
    page = pages.dom("/nodes")
    rows = page.by_id("node-results").one("tbody").find_all("tr")
    assert [r.one("th").clean_text for r in rows] == ["node-a", "node-b"]
    assert (
        "Reporting" in rows[0].clean_text
        and f"{GPU} 3/4 · 1 unhealthy · 2 allocated" in rows[0].clean_text
    )
    assert rows[1].has_class("row-stale") and "Stale" in rows[1].clean_text
    stale_only = pages.dom("/nodes?stale=yes").by_id("node-results")
    assert [r.one("th").clean_text for r in stale_only.one("tbody").find_all("tr")] == ["node-b"]


def test_node_page_groups_tiles_by_resource_and_numa(
    pages: Pages, ingest: Ingest, session_factory: sessionmaker[Session]
) -> None:
    typical_cluster(ingest)
    with write_session(session_factory) as session:
        session.execute(
            update(Node)
            .where(Node.name == "node-a")
            .values(
                capacity={"cpu": "8", GPU: "4", "example.com/dongle": "2"},
                allocatable={"cpu": "8", GPU: "3", "example.com/dongle": "2"},
                kube_synced_at=utcnow(),
            )
        )
    page = pages.dom("/nodes/node-a")
    devices = page.by_id("node-devices")
    sections = devices.find_all("section")
    assert [s.one("h2").text for s in sections] == [GPU, NIC]
    gpu = sections[0]
    groups = [(h.clean_text, tile_ids(h.parent)) for h in gpu.find_all("h3") if h.parent]
    # Natural order inside a group: gpu-2 before gpu-10.
    assert groups == [("NUMA 0 · 2", ["gpu-0", "gpu-1"]), ("NUMA 1 · 2", ["gpu-2", "gpu-10"])]
    tiles = dict(zip(tile_ids(gpu), gpu.find_all("li"), strict=True))
    assert "Unhealthy" in tiles["gpu-2"].clean_text and tiles["gpu-2"].has_class("tile-unhealthy")
    assert "ml/trainer-0" in tiles["gpu-0"].clean_text and "main" in tiles["gpu-0"].clean_text
    assert "free" in tiles["gpu-10"].clean_text
    assert "capacity 4, allocatable 3" in gpu.clean_text
    side = page.by_id("node-side")
    assert "example.com/dongle 2 2" in side.one("table").clean_text
    assert GPU not in side.one("table").clean_text  # plugin-backed, shown with its devices
    assert "plugin.sock" in side.clean_text
    assert page.by_id("node-events").find_all("li")


def test_node_page_is_bounded_however_many_devices_the_node_had(
    pages: Pages, ingest: Ingest
) -> None:
    """Removed devices are never deleted, so a node's page would grow with every device it
    ever had: past a limit, tiles stop and the page links to the device list instead."""
    shown, removed_shown = NODE_TILE_LIMIT, NODE_REMOVED_TILE_LIMIT
    ingest.devices("node-a", [dev(f"old-{i}") for i in range(removed_shown + 6)])
    ingest.devices("node-a", [dev(f"gpu-{i}") for i in range(shown + 8)])
    gpu = pages.dom("/nodes/node-a").by_id("node-devices").one("section")
    assert f"{shown + 8} devices" in gpu.clean_text
    removed = gpu.one("details")
    assert removed.one("summary").clean_text == f"{removed_shown + 6} removed"
    assert len(removed.find_all("li")) == removed_shown
    assert len(gpu.find_all("li")) == shown + removed_shown
    links = {
        a.clean_text: a.attrs["href"]
        for a in gpu.find_all("a")
        if a.attrs["href"][:9] == "/devices?"
    }
    listing = f"/devices?node=node-a&resource={GPU}"
    assert links == {
        "All of them in the device list": listing,
        "All removed devices in the device list": f"{listing}&state=removed",
    }


def test_devices_table_filters_sorts_and_pages(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    results = pages.dom("/devices?health=Unhealthy").by_id("device-results")
    assert [r.one("th").clean_text for r in results.one("tbody").find_all("tr")] == ["gpu-2"]
    free = pages.dom(f"/devices?allocated=no&resource={GPU}&node=node-a").by_id("device-results")
    # The table sorts as the API does (by text); only tiles use natural order.
    assert [r.one("th").clean_text for r in free.one("tbody").find_all("tr")] == ["gpu-10", "gpu-2"]
    held_by = pages.dom("/devices?namespace=ml&pod=trainer-1").by_id("device-results")
    assert [r.one("th").clean_text for r in held_by.one("tbody").find_all("tr")] == ["gpu-1"]
    search = pages.dom("/devices?q=nic").by_id("device-results")
    assert len(search.one("tbody").find_all("tr")) == 2
    # The Health column sorts unhealthy first; ?sort=health (by text) still works.
    by_health = pages.dom("/devices?sort=attention&limit=25").by_id("device-results")
    assert "Unhealthy" in by_health.one("tbody").find_all("tr")[0].clean_text
    assert by_health.one("th", aria_sort="ascending").clean_text.startswith("Health")
    by_text = pages.dom("/devices?sort=-health&limit=25").by_id("device-results")
    assert "Unhealthy" in by_text.one("tbody").find_all("tr")[0].clean_text
    # Keyset pages: 8 devices, 25 per page fits; force two pages through the cursor.
    first = pages.dom("/devices?limit=25&q=gpu").by_id("device-results")
    assert first.find("a", rel="next") is None
    page_one = pages.dom("/devices?resource=" + GPU + "&sort=device_id&limit=25")
    assert "6 devices" in page_one.by_id("device-results").one("nav", class_="pager").clean_text


def test_device_pages_follow_keyset_cursor(pages: Pages, ingest: Ingest) -> None:
    ingest.devices("node-a", [dev(f"gpu-{i:02d}") for i in range(30)])
    first = pages.dom("/devices?sort=device_id&limit=25")
    next_link = first.by_id("device-results").one("a", rel="next")
    href = next_link.attrs["href"]
    assert "cursor=" in href and "sort=device_id" in href and "limit=25" in href
    second = pages.dom(href).by_id("device-results")
    assert [r.one("th").clean_text for r in second.one("tbody").find_all("tr")] == [
        f"gpu-{i:02d}" for i in range(25, 30)
    ]
    assert second.find("a", rel="next") is None


def test_device_detail_shows_holder_and_history(
    pages: Pages, ingest: Ingest, session_factory: sessionmaker[Session]
) -> None:
    typical_cluster(ingest)
    ingest.devices(
        "node-a",
        [
            dev("gpu-0", "Unhealthy", [0]),
            dev("gpu-1", numa=[0]),
            dev("gpu-2", "Unhealthy", [1]),
            dev("gpu-10", numa=[1]),
        ],
    )
    ingest.pods("node-a", [held("ml", "trainer-2", "main", GPU, "gpu-0")])
    page = pages.dom(f"/devices/{device_pk(session_factory, 'node-a', 'gpu-0')}")
    summary = page.by_id("device-summary")
    assert "gpu-0" in summary.one("h1").clean_text and "Unhealthy" in summary.one("h1").clean_text
    assert "ml/trainer-2" in summary.clean_text
    history = page.by_id("device-history")
    alloc_rows = row_texts(history.find_all("table")[0])
    assert alloc_rows[0].startswith("ml/trainer-2 main") and "now" in alloc_rows[0]
    assert alloc_rows[1].startswith("ml/trainer-0 main")
    timeline = history.one("div", class_="timeline")
    states = [
        r.attrs["class"]
        for r in timeline.find_all("rect")
        if r.attrs.get("class", "").startswith("st-")
    ]
    assert states == ["st-healthy", "st-unhealthy", "st-held", "st-held"]
    assert "Health changed" in history.clean_text


def test_pods_page_lists_namespaces_pods_containers_devices(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    ingest.devices("node-b", [dev("nic-0")], resource=NIC)
    pair = held("ml", "pair", "left", GPU, "gpu-0")
    pair["containers"].append(
        {"name": "right", "devices": [{"resource_name": NIC, "device_ids": ["nic-0"]}]}
    )
    ingest.pods("node-b", [held("ml", "trainer-1", "worker", GPU, "gpu-1"), pair])
    results = pages.dom("/pods").by_id("pod-results")
    sections = results.find_all("section", class_="card card-flush namespace")
    assert [s.one("h2").clean_text for s in sections] == ["Namespace ml"]
    pods = sections[0].find_all("tbody", class_="pod")
    assert [p.one("a", class_="pod-name").text for p in pods] == [
        "pair",
        "trainer-0",
        "trainer-1",
    ]

    def containers(pod: Element) -> list[tuple[str, list[str]]]:
        return [
            (row.one("td", class_="container-name").text,
             [chip.one("span", class_="mono").text for chip in row.find_all("a")
              if chip.has_class("chip")])
            for row in pod.find_all("tr")
        ]  # fmt: skip

    assert containers(pods[0]) == [("left", ["gpu-0"]), ("right", ["nic-0"])]
    assert pods[0].one("th").attrs["rowspan"] == "2" and "node-b" in pods[0].clean_text
    assert containers(pods[1]) == [("main", ["gpu-0", "gpu-1"])]
    assert "node-a" in pods[1].clean_text
    only_b = pages.dom("/pods?node=node-b&q=trainer").by_id("pod-results")
    assert [p.one("a", class_="pod-name").text for p in only_b.find_all("tbody", class_="pod")] == [
        "trainer-1"
    ]


def test_events_page_filters_by_kind_and_node(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    page = pages.dom("/events?kind=health_changed")
    assert page.by_id("event-results").find("tbody") is None  # none yet: gpu-2 started unhealthy
    ingest.devices("node-b", [dev("gpu-0", "Unhealthy", [0]), dev("gpu-1", numa=[0])])
    rows = row_texts(pages.dom("/events?kind=health_changed").by_id("event-results").one("table"))
    assert len(rows) == 1 and "gpu-0 " in rows[0] and "node-b" in rows[0]
    assert "✓Healthy →to ✕Unhealthy" in rows[0]  # icon and word, before and after
    node_a = row_texts(
        pages.dom("/events?node=node-a&kind=allocated").by_id("event-results").one("table")
    )
    assert len(node_a) == 2 and all("node-a" in r for r in node_a)


def test_hostile_values_render_as_text(
    pages: Pages, ingest: Ingest, session_factory: sessionmaker[Session]
) -> None:
    hostile = "<img src=x onerror=alert(1)>"
    script = '"><script>alert(2)</script>'
    ingest.devices("node-a", [dev(hostile, numa=[0]), dev(script)])
    ingest.pods("node-a", [held("ml", "trainer-0", "main", GPU, hostile)])
    # Pod names and labels reach the database from other writers too (the cluster watcher);
    # whatever is stored must come out as text.
    with write_session(session_factory) as session:
        session.execute(update(Allocation).values(pod="<b>pod</b>", container="<i>c</i>"))
        session.execute(
            update(Node).values(
                labels={"evil/<svg onload=alert(3)>": "<script>alert(4)</script>"},
                capacity={"example.com/<u>x</u>": "1"},
                kube_synced_at=utcnow(),
            )
        )
    pk = device_pk(session_factory, "node-a", hostile)
    for path in ["/", "/nodes", "/nodes/node-a", "/devices", f"/devices/{pk}", "/pods", "/events"]:
        page = pages.dom(path)
        for tag in ("img", "b", "i", "u", "svg"):
            injected = [e for e in page.find_all(tag) if tag != "svg" or "onload" in str(e.attrs)]
            assert not injected, (path, tag)
        assert all("src" in s.attrs for s in page.find_all("script")), path
        assert not any(
            name.startswith("on") for element in page.iter() for name in element.attrs
        ), path
    devices_text = pages.dom("/devices").clean_text
    assert hostile in devices_text and script in devices_text and "<b>pod</b>" in devices_text
    node_text = pages.dom("/nodes/node-a").clean_text
    assert "evil/<svg onload=alert(3)>" in node_text and "<script>alert(4)</script>" in node_text
    # Not an extended resource name by the kubelet's rule, so not listed as advertised by hand.
    assert "example.com/<u>x</u>" not in node_text


def test_missing_things_get_a_404_page(pages: Pages) -> None:
    page = pages.dom("/nodes/nowhere", expect=404)
    assert "No such node" in page.one("h1").text and "nowhere" in page.clean_text
    assert pages.dom("/devices/12345", expect=404).one("h1").text == "No such device"
    assert pages.dom("/devices/not-a-number", expect=404).one("h1").text == "No such device"


BAD_FILTERS = [
    ("/devices?health=Sick", "health", "enum"),
    ("/devices?cursor=garbage", "cursor", "cursor"),
    ("/devices?sort=color", "sort", "enum"),
    ("/nodes?q=" + "x" * 300, "q", "max_length"),
    ("/events?device=abc", "device", "integer"),
    ("/pods?limit=7", "limit", "enum"),
    ("/?window=1y", "window", "enum"),
]


def test_bad_filters_get_422_naming_field_and_rule(pages: Pages) -> None:
    for path, field, rule in BAD_FILTERS:
        page = pages.dom(path, expect=422)
        alert = page.one(role="alert")
        assert alert.one("code").text == field, path
        assert f"rule: {rule}" in alert.clean_text, path


def test_errors_raised_before_a_page_runs_answer_the_error_page(pages: Pages) -> None:
    """A NUL in the query string is refused for every route before the route runs: a page
    answers it with the HTML error page, as it does a too-long value, and /api with JSON."""
    response = pages.get("/devices?q=a%00b", expect=422)
    assert response.headers["content-type"].startswith("text/html")
    page = parse(response.text)
    assert page.one("h1").text == "Invalid input"
    assert "rule: no_nul" in page.one("li").clean_text and page.one("code").text == "q"
    api = pages.get("/api/v1/devices?q=a%00b", expect=422)
    assert api.json()["error"]["details"][0] == {
        "field": "q",
        "rule": "no_nul",
        "message": "must not contain NUL characters",
    }
    refused = pages.client.post("/devices", headers=pages.headers)
    assert refused.status_code == 405 and refused.headers["content-type"].startswith("text/html")
