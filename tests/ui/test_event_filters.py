"""The events page's time and device filters, and the Export links of events and devices."""

from __future__ import annotations

import csv
import io
from urllib.parse import parse_qs, urlsplit

from .conftest import GPU, Ingest, Pages, dev, held, typical_cluster
from .test_pages import row_texts


def test_events_filter_by_time_and_device_id(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    ingest.devices("node-b", [dev("gpu-0", "Unhealthy", [0]), dev("gpu-1", numa=[0])])
    recent = row_texts(pages.dom("/events?since=1h&kind=health_changed").one("table"))
    assert len(recent) == 1 and "gpu-0" in recent[0]
    assert pages.dom("/events?until=2020-01-01 00:00").by_id("event-results").find("table") is None
    old = pages.dom("/events?until=2h").by_id("event-results")
    assert "No event matches these filters" in old.clean_text
    only = row_texts(pages.dom("/events?device_id=gpu-10").one("table"))
    assert len(only) == 1 and "gpu-10" in only[0] and "Device added" in only[0]
    page = pages.dom("/events?since=yesterday-ish", expect=422)
    assert "since" in page.by_id("event-results").clean_text


def test_export_links_give_the_rows_the_page_shows(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    ingest.pods("node-b", [held("ml", "trainer-1", "worker", GPU, "gpu-0", "gpu-1")])
    page = pages.dom("/events?since=1h&node=node-b&kind=allocated")
    link = page.by_id("event-results").one("a", class_="btn btn-quiet export")
    query = parse_qs(urlsplit(link.attrs["href"]).query)
    assert query["format"] == ["csv"] and query["node"] == ["node-b"]
    assert query["since"][0].endswith("+00:00")  # the age, as the time it meant
    rows = list(csv.DictReader(io.StringIO(pages.get(link.attrs["href"]).text)))
    shown = row_texts(page.one("table"))
    assert len(rows) == len(shown) == 2 and {r["device_id"] for r in rows} == {"gpu-0", "gpu-1"}

    devices = pages.dom("/devices?health=Unhealthy&allocated=no")
    link = devices.by_id("device-results").one("a", class_="btn btn-quiet export")
    exported = list(csv.DictReader(io.StringIO(pages.get(link.attrs["href"]).text)))
    assert [(r["node"], r["device_id"]) for r in exported] == [("node-a", "gpu-2")]


def test_devices_node_prefix_case_insensitive_values_and_new_sorts(
    pages: Pages, ingest: Ingest
) -> None:
    typical_cluster(ingest)
    page = pages.dom("/devices?node=node&health=unhealthy")
    assert [o.attrs["value"] for o in page.by_id("node-names").find_all("option")] == [
        "node-a",
        "node-b",
    ]
    rows = row_texts(page.by_id("device-results").one("table"))
    assert len(rows) == 1 and rows[0].startswith("gpu-2")
    selected = [o for o in page.by_id("f-health").find_all("option") if "selected" in o.attrs]
    assert [o.attrs["value"] for o in selected] == ["Unhealthy"]
    exact = pages.dom("/devices?node=node-b").by_id("device-results").one("table")
    assert len(row_texts(exact)) == 2
    headers = pages.dom("/devices").by_id("device-results").find_all("a", class_="sort")
    assert {a.clean_text.rstrip("↕▲▼") for a in headers} >= {"Held by", "Health since", "Health"}
    first = row_texts(pages.dom("/devices?sort=attention").by_id("device-results").one("table"))
    assert first[0].startswith("gpu-2")
    held_first = pages.dom("/devices?sort=-holder").by_id("device-results").one("table")
    assert "web/idle" not in row_texts(held_first)[0] and "ml/trainer-1" in row_texts(held_first)[0]
