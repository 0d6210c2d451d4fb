"""`?format=csv` on /api/v1/devices and /api/v1/events: every matching row, the JSON filters,
streamed; and the events' since/until/device_id filters."""

from __future__ import annotations

import csv
import io
from datetime import datetime

from .conftest import GPU, Api, dev, held, listandwatch, pod, podresources


def table(api: Api, path: str, **params: str) -> list[dict[str, str]]:
    response = api.client.get(path, params={**params, "format": "csv"}, headers=api.headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    return list(csv.DictReader(io.StringIO(response.text)))


def test_csv_has_every_matching_row_across_pages(api: Api) -> None:
    devices = [dev(f"gpu-{i:04d}", "Unhealthy" if i % 7 == 0 else "Healthy") for i in range(1203)]
    api.ingest_listandwatch(listandwatch("node-a", devices, 1))
    rows = table(api, "/api/v1/devices", limit="5")
    assert len(rows) == 1203  # limit is for JSON pages; the export has everything
    assert [r["device_id"] for r in rows] == sorted(r["device_id"] for r in rows)
    unhealthy = table(api, "/api/v1/devices", health="Unhealthy")
    as_json = api.all_pages("/api/v1/devices", health="Unhealthy")
    assert [r["id"] for r in unhealthy] == [str(d["id"]) for d in as_json]
    assert {r["health"] for r in unhealthy} == {"Unhealthy"} and len(unhealthy) == 172
    events = table(api, "/api/v1/events", kind="device_added")
    assert len(events) == 1203 and events[0]["kind"] == "device_added"


def test_csv_columns_nested_values_and_formula_cells(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("=HYPERLINK(1)"), dev("gpu-1")], 1))
    job = pod("train", containers={"main": [held(GPU, "gpu-1")]})
    api.ingest_podresources(podresources("node-a", [job], 1))
    rows = {r["id"]: r for r in table(api, "/api/v1/devices")}
    by_device = {r["device_id"]: r for r in rows.values()}
    # A spreadsheet would run the first as a formula; it is written as text.
    assert "'=HYPERLINK(1)" in by_device
    held_row = by_device["gpu-1"]
    assert (held_row["allocation.namespace"], held_row["allocation.pod"]) == ("ml", "train")
    assert held_row["node_stale"] == "false"
    [allocated] = table(api, "/api/v1/events", kind="allocated")
    assert (allocated["pod"], allocated["device_id"]) == ("train", "gpu-1")


def test_csv_with_a_bad_filter_is_the_usual_422(api: Api) -> None:
    response = api.client.get(
        "/api/v1/devices", params={"format": "csv", "sort": "color"}, headers=api.headers
    )
    assert response.status_code == 422
    assert [d["field"] for d in response.json()["error"]["details"]] == ["sort"]
    response = api.client.get("/api/v1/events", params={"format": "xml"}, headers=api.headers)
    assert response.status_code == 422
    assert [d["field"] for d in response.json()["error"]["details"]] == ["format"]


def test_events_since_until_and_device_id(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0", "Unhealthy"), dev("gpu-1")], 2))
    both = [dev("gpu-0", "Unhealthy"), dev("gpu-1", "Unhealthy")]
    api.ingest_listandwatch(listandwatch("node-a", both, 3))
    changes = api.events(kind="health_changed")
    newest, oldest = changes
    assert api.events(kind="health_changed", device_id="gpu-0") == [oldest]
    assert api.events(kind="health_changed", until=oldest["at"]) == [oldest]
    assert api.events(kind="health_changed", since=newest["at"]) == [newest]
    window = {"since": oldest["at"], "until": newest["at"]}
    assert len(api.events(kind="health_changed", **window)) == 2
    csv_rows = table(api, "/api/v1/events", kind="health_changed", until=oldest["at"])
    assert [r["id"] for r in csv_rows] == [str(oldest["id"])]
    naive = datetime.fromisoformat(oldest["at"]).replace(tzinfo=None).isoformat()
    response = api.client.get("/api/v1/events", params={"until": naive}, headers=api.headers)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["field"] == "until"
