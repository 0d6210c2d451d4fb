"""Every time on the pages is a <time datetime> with its date and time in UTC (the script
rewrites it in the zone the reader chose); incident tables show it, feeds put it on hover."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from .conftest import GPU, Ingest, Pages, dev, held, typical_cluster

UTC_TEXT = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC")


def test_times_carry_date_time_and_zone(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    ingest.pods("node-a", [held("ml", "trainer-0", "main", GPU, "gpu-0")])
    ingest.devices("node-a", [dev("gpu-0", "Unhealthy")])
    listed = pages.dom("/devices?q=gpu-0&node=node-a").find_all("a")
    [gpu] = [a for a in listed if a.text == "gpu-0"]
    for path in ("/", "/events", "/nodes/node-a", gpu.attrs["href"], "/pods/ml/trainer-0"):
        times = pages.dom(path).find_all("time")
        assert times, path
        for element in times:
            assert element.attrs["datetime"], path
            assert UTC_TEXT.fullmatch(element.attrs["title"]), (path, element.attrs)
            assert UTC_TEXT.fullmatch(element.text), (path, element.text)
    events = pages.dom("/events").by_id("event-results").one("table")
    assert all("data-absolute" in t.attrs for t in events.find_all("time"))
    holds = pages.dom("/pods/ml/trainer-0").by_id("pod-holds").one("table")
    assert all("data-absolute" in t.attrs for t in holds.find_all("time"))
    switch = pages.dom("/").by_id("zone-switch")
    assert switch.attrs["aria-pressed"] == "false" and "UTC" in switch.clean_text


def test_chart_now_matches_the_resources_table(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    trends = {"HX-Request": "true", "HX-Target": "overview-trends"}
    pages.get("/", **trends)  # draws the charts, kept for a minute
    ingest.devices("node-b", [dev("gpu-0"), dev("gpu-1"), dev("gpu-7")])
    charts = pages.dom("/", **trends)
    [gpu] = [f for f in charts.find_all("figure") if GPU in f.clean_text]
    table = pages.dom("/").by_id("overview-resources").one("table")
    [row] = [r for r in table.find_all("tr") if GPU in r.clean_text]
    devices = row.find_all("td")[1].clean_text
    assert devices == "7"
    assert gpu.one("span", class_="chart-now").clean_text.endswith(f"of {devices}")


def test_charts_start_where_the_data_starts_in_a_window_that_fits(
    pages: Pages, ingest: Ingest
) -> None:
    typical_cluster(ingest)
    page = pages.dom("/")
    current = [a for a in page.find_all("a") if a.attrs.get("aria-current") == "true"]
    assert [a.text for a in current if a.text in ("1h", "6h", "24h", "7d")] == ["1h"]
    charts = pages.dom("/", **{"HX-Request": "true", "HX-Target": "overview-trends"})
    ticks = [t.attrs["data-time"] for t in charts.find_all("text") if "data-time" in t.attrs]
    first_seen = min(d["first_seen"] for d in pages.get("/api/v1/devices").json()["results"])
    step = timedelta(hours=1) / 96  # one sample of the hour's chart
    assert datetime.fromisoformat(ticks[0]) >= datetime.fromisoformat(first_seen) - 2 * step
    day = pages.dom("/?window=24h", **{"HX-Request": "true", "HX-Target": "overview-trends"})
    day_ticks = [t.attrs["data-time"] for t in day.find_all("text") if "data-time" in t.attrs]
    assert datetime.fromisoformat(day_ticks[0]) >= datetime.fromisoformat(first_seen) - timedelta(
        minutes=30
    )
