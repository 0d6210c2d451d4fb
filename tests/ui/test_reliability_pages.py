"""/reliability, and the reliability parts of the node and device pages: "which devices should
I drain, and which jobs did each cost us?"."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from .conftest import GPU, Ingest, Pages, dev, held, typical_cluster
from .test_pages import device_pk, row_texts


def flap_gpu_0(ingest: Ingest) -> None:
    """node-a's gpu-0, held by ml/trainer-0, fails twice and recovers; gpu-2 stays Unhealthy."""
    for health in ("Unhealthy", "Healthy", "Unhealthy", "Healthy"):
        ingest.devices(
            "node-a",
            [
                dev("gpu-0", health, numa=[0]),
                dev("gpu-1", numa=[0]),
                dev("gpu-2", "Unhealthy", numa=[1]),
                dev("gpu-10", numa=[1]),
            ],
        )


def test_ranking_puts_the_flapping_device_first_and_links_what_it_hit(
    pages: Pages, ingest: Ingest, session_factory: sessionmaker[Session]
) -> None:
    typical_cluster(ingest)
    flap_gpu_0(ingest)
    page = pages.dom("/reliability")
    nav = page.one("nav", aria_label="Main")
    assert [a.attrs["href"] for a in nav.find_all("a", aria_current="page")] == ["/reliability"]
    results = page.by_id("reliability-results")
    table = results.one("table", class_="table table-rows table-cards reliability-table")
    rows = row_texts(table)
    # gpu-0 failed twice; gpu-2 was Unhealthy from its first report, once.
    assert [r.split()[0] for r in rows] == ["gpu-0", "gpu-2"]
    first = table.one("tbody").find_all("tr")[0]
    links = [a.attrs["href"] for a in first.find_all("a")]
    gpu_0 = device_pk(session_factory, "node-a", "gpu-0")
    assert links == [f"/devices/{gpu_0}", "/nodes/node-a", "/pods/ml/trainer-0"]
    assert "2 devices" in results.one("nav", class_="pager").clean_text
    export = results.one("a", class_="btn btn-quiet export").attrs["href"]
    assert export.startswith("/api/v1/reliability/devices?") and "format=csv" in export
    by_node = results.one("section", aria_label="By node")
    assert row_texts(by_node.one("table"))[0].startswith("node-a")

    def ranked(path: str) -> list[str]:
        return row_texts(pages.dom(path).one("table", class_=table.attrs["class"]))

    by_pods = ranked("/reliability?sort=pods_hit")
    assert [r.split()[0] for r in by_pods] == ["gpu-2", "gpu-0"]
    assert "No device turned Unhealthy" in pages.dom("/reliability?node=node-b").clean_text


def test_node_page_marks_flapping_tiles_and_device_page_counts_failures(
    pages: Pages, ingest: Ingest, session_factory: sessionmaker[Session]
) -> None:
    typical_cluster(ingest)
    flap_gpu_0(ingest)
    node = pages.dom("/nodes/node-a")
    flapping = [
        tile.one("span", class_="tile-id mono").text
        for tile in node.by_id("node-devices").find_all("li")
        if tile.find("span", class_="tag tag-bad flap")
    ]
    assert flapping == ["gpu-0"]
    card = node.by_id("node-reliability")
    assert "3 failures" in card.clean_text
    assert [li.clean_text.split()[0] for li in card.find_all("li")] == ["gpu-0", "gpu-2"]

    device = pages.dom(f"/devices/{device_pk(session_factory, 'node-a', 'gpu-0')}")
    since = device.by_id("device-summary").one("span", class_="tag tag-bad recent-failures")
    assert since.clean_text == "unhealthy 2 times in 24 h"
    figures = device.by_id("device-reliability")
    assert "Failures 2" in figures.clean_text
    assert [a.attrs["href"] for a in figures.find_all("a")][-1] == "/pods/ml/trainer-0"
    steady = pages.dom(f"/devices/{device_pk(session_factory, 'node-b', 'gpu-0')}")
    assert steady.by_id("device-summary").find("span", class_="tag tag-bad recent-failures") is None
    assert "Failures 0" in steady.by_id("device-reliability").clean_text


def test_bad_window_is_a_422_naming_the_field(pages: Pages, ingest: Ingest) -> None:
    ingest.devices("node-a", [dev("gpu-0")])
    ingest.pods("node-a", [held("ml", "job", "main", GPU, "gpu-0")])
    page = pages.dom("/reliability?window=3d", expect=422)
    assert "window" in page.one("div", class_="notice notice-error").clean_text
    custom = pages.dom("/reliability?window=custom&since=1h&until=2h", expect=422)
    assert "since" in custom.one("div", class_="notice notice-error").clean_text
