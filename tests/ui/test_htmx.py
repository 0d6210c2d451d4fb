"""htmx rules: pushed URLs are full pages, fragments only for htmx, live refresh swaps only
what changed."""

from __future__ import annotations

from urllib.parse import urlencode

from .conftest import GPU, Ingest, Pages, dev, typical_cluster
from .dom import parse

HX = {"HX-Request": "true"}


def test_every_page_response_varies_on_htmx_headers(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    for path in ["/", "/nodes", "/nodes/node-a", "/devices", "/pods", "/events", "/nodes/x"]:
        response = pages.client.get(path, headers=pages.headers)
        assert "HX-Request" in [v.strip() for v in response.headers["vary"].split(",")], path
        assert response.headers["cache-control"] == "no-store", path


def test_fragment_for_htmx_full_page_otherwise(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    url = f"/devices?health=Unhealthy&node=&resource={GPU}"
    full = pages.get(url)
    assert parse(full.text).one("html") and "HX-Push-Url" not in full.headers

    fragment = pages.get(url, **HX, **{"HX-Target": "device-results"})
    tree = parse(fragment.text)
    assert tree.find("html") is None and tree.find("form") is None
    results = tree.by_id("device-results")
    assert [r.one("th").clean_text for r in results.one("tbody").find_all("tr")] == ["gpu-2"]
    # The URL pushed into history is the canonical one, which loads as a full page.
    pushed = fragment.headers["HX-Push-Url"]
    assert pushed == "/devices?" + urlencode({"resource": GPU, "health": "Unhealthy"})
    assert parse(pages.get(pushed).text).one("html")

    # A history restore after a cache miss wants the whole page, even though htmx sends it.
    restore = pages.get(
        url, **HX, **{"HX-Target": "device-results", "HX-History-Restore-Request": "true"}
    )
    assert parse(restore.text).one("html") and restore.text.count('id="device-results"') == 1

    # An htmx request for something that is not a region of this page gets the page.
    assert parse(pages.get(url, **HX, **{"HX-Target": "main"}).text).one("html")


def test_invalid_filter_fragment_is_422_with_the_problem(pages: Pages) -> None:
    response = pages.get("/devices?health=Sick", 422, **HX, **{"HX-Target": "device-results"})
    alert = parse(response.text).by_id("device-results").one(role="alert")
    assert alert.one("code").text == "health"
    assert "HX-Push-Url" not in response.headers


def live_refresh(pages: Pages, path: str, digests: dict[str, str], expect: int = 200) -> str:
    separator = "&" if "?" in path else "?"
    return pages.get(
        path + separator + urlencode(digests), expect, **HX, **{"HX-Target": "live"}
    ).text


def digests_of(html: str) -> dict[str, str]:
    return {
        e.attrs["name"]: e.attrs["value"]
        for e in parse(html).find_all("input")
        if e.has_class("live-v")
    }


def test_live_refresh_swaps_only_changed_regions(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    page = pages.get("/nodes/node-a").text
    digests = digests_of(page)
    assert set(digests) == {
        "v-node-summary",
        "v-node-devices",
        "v-node-dra",
        "v-node-side",
        "v-node-reliability",
        "v-node-events",
    }
    # Nothing changed: 204, and htmx swaps nothing.
    assert live_refresh(pages, "/nodes/node-a", digests, expect=204) == ""

    ingest.devices(
        "node-a",
        [dev("gpu-0", "Unhealthy", [0]), dev("gpu-1", numa=[0]), dev("gpu-2", "Unhealthy", [1])],
    )
    tree = parse(live_refresh(pages, "/nodes/node-a", digests))
    swapped = {e.attrs["id"] for e in tree.find_all("div") if "hx-swap-oob" in e.attrs}
    # The plugins and labels did not change; the summary did (the node was just seen), and a
    # device turning Unhealthy is a failure in the node's reliability figures.
    assert swapped == {"node-summary", "node-devices", "node-reliability", "node-events"}
    tiles = tree.by_id("node-devices").find_all("li")
    assert len([t for t in tiles if t.has_class("tile-unhealthy")]) == 2
    assert len([t for t in tiles if t.has_class("tile-removed")]) == 1


def test_live_refresh_follows_the_current_filters(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    path = "/devices?health=Unhealthy"
    digests = digests_of(pages.get(path).text)
    ingest.devices("node-b", [dev("gpu-0", "Unhealthy", [0]), dev("gpu-1", numa=[0])])
    tree = parse(live_refresh(pages, path, digests))
    rows = tree.by_id("device-results").one("tbody").find_all("tr")
    assert sorted(r.one("th").clean_text for r in rows) == ["gpu-0", "gpu-2"]
