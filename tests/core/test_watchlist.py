"""The watch list over the API: marking a device for return (admin), reading the list and
each mark (read), CSV export, and the rules a bad request breaks, changing nothing."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from devicedeck.inventory.watchlist import marks_for

from .conftest import Api, dev, listandwatch

MakeToken = Callable[..., str]


def _two_gpus(api: Api) -> tuple[int, int]:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1", "Unhealthy")], 1))
    return api.device("node-a", "gpu-0")["id"], api.device("node-a", "gpu-1")["id"]


def test_an_admin_marks_a_device_and_readers_see_who_when_and_why(
    api: Api, make_token: MakeToken
) -> None:
    _, flaky = _two_gpus(api)
    response = api.client.put(
        f"/api/v1/watchlist/{flaky}", json={"note": "  RMA 4411  "}, headers=api.headers
    )
    assert response.status_code == 200, response.text
    mark = response.json()
    assert (mark["id"], mark["device_id"], mark["node"]) == (flaky, "gpu-1", "node-a")
    assert (mark["marked_by"], mark["note"], mark["health"]) == ("tester", "RMA 4411", "Unhealthy")
    reader = {"Authorization": f"Bearer {make_token('read', name='viewer')}"}
    listed = api.client.get("/api/v1/watchlist", headers=reader).json()
    assert [r["device_id"] for r in listed["results"]] == ["gpu-1"]
    assert listed["count"] == 1
    one = api.client.get(f"/api/v1/watchlist/{flaky}", headers=reader)
    assert one.status_code == 200 and one.json()["marked_at"] == mark["marked_at"]
    # Marking again replaces the mark; no body means no note.
    again = api.client.put(f"/api/v1/watchlist/{flaky}", headers=api.headers).json()
    assert again["note"] is None
    assert len(api.get("/api/v1/watchlist")["results"]) == 1


def test_only_the_admin_scope_changes_the_list(api: Api, make_token: MakeToken) -> None:
    healthy, _ = _two_gpus(api)
    reader = {"Authorization": f"Bearer {make_token('read', name='viewer')}"}
    refused = api.client.put(f"/api/v1/watchlist/{healthy}", json={}, headers=reader)
    assert refused.status_code == 403
    assert api.get("/api/v1/watchlist")["results"] == []
    api.client.put(f"/api/v1/watchlist/{healthy}", json={}, headers=api.headers)
    assert api.client.delete(f"/api/v1/watchlist/{healthy}", headers=reader).status_code == 403
    assert len(api.get("/api/v1/watchlist")["results"]) == 1


def test_unmarking_takes_a_device_off_and_is_safe_to_repeat(api: Api) -> None:
    healthy, flaky = _two_gpus(api)
    for pk in (healthy, flaky):
        api.client.put(f"/api/v1/watchlist/{pk}", json={}, headers=api.headers)
    assert api.client.delete(f"/api/v1/watchlist/{healthy}", headers=api.headers).status_code == 204
    assert api.client.delete(f"/api/v1/watchlist/{healthy}", headers=api.headers).status_code == 204
    assert [r["id"] for r in api.get("/api/v1/watchlist")["results"]] == [flaky]
    missing = api.client.get(f"/api/v1/watchlist/{healthy}", headers=api.headers)
    assert missing.status_code == 404
    assert "not on the watch list" in missing.json()["error"]["message"]


def test_bad_requests_name_the_field_and_change_nothing(api: Api) -> None:
    healthy, _ = _two_gpus(api)
    too_long = api.client.put(
        f"/api/v1/watchlist/{healthy}", json={"note": "x" * 501}, headers=api.headers
    )
    assert too_long.status_code == 422
    assert [d["field"] for d in too_long.json()["error"]["details"]] == ["note"]
    nul = api.client.put(
        f"/api/v1/watchlist/{healthy}", json={"note": "a\u0000b"}, headers=api.headers
    )
    assert nul.status_code == 422
    assert [d["field"] for d in nul.json()["error"]["details"]] == ["note"]
    extra = api.client.put(f"/api/v1/watchlist/{healthy}", json={"color": 1}, headers=api.headers)
    assert extra.status_code == 422
    nobody = api.client.put("/api/v1/watchlist/999999", json={}, headers=api.headers)
    assert nobody.status_code == 404
    assert api.client.delete("/api/v1/watchlist/999999", headers=api.headers).status_code == 404
    assert api.client.put("/api/v1/watchlist/0", json={}, headers=api.headers).status_code == 422
    assert api.get("/api/v1/watchlist")["results"] == []


def test_the_list_pages_newest_first_and_exports_every_row_as_csv(api: Api) -> None:
    devices = [dev(f"gpu-{i:02d}") for i in range(7)]
    api.ingest_listandwatch(listandwatch("node-a", devices, 1))
    pks = [api.device("node-a", f"gpu-{i:02d}")["id"] for i in range(7)]
    for pk in pks:
        api.client.put(f"/api/v1/watchlist/{pk}", json={"note": "=cmd"}, headers=api.headers)
    paged = api.all_pages("/api/v1/watchlist", limit=3)
    assert [r["id"] for r in paged] == list(reversed(pks))
    response = api.client.get(
        "/api/v1/watchlist", params={"format": "csv", "limit": 2}, headers=api.headers
    )
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert [int(r["id"]) for r in rows] == list(reversed(pks))
    assert {r["marked_by"] for r in rows} == {"tester"}
    assert {r["note"] for r in rows} == {"'=cmd"}  # a formula cell is written as text


def test_marks_for_a_set_of_devices(api: Api, session_factory: sessionmaker[Session]) -> None:
    healthy, flaky = _two_gpus(api)
    api.client.put(f"/api/v1/watchlist/{flaky}", json={"note": "flaps"}, headers=api.headers)
    with session_factory() as session:
        found = marks_for(session, [healthy, flaky, 999999])
        assert marks_for(session, []) == {}
    assert list(found) == [flaky]
    assert (found[flaky]["note"], found[flaky]["marked_by"]) == ("flaps", "tester")


def test_a_removed_device_keeps_its_mark(api: Api) -> None:
    _, flaky = _two_gpus(api)
    api.client.put(f"/api/v1/watchlist/{flaky}", json={"note": "RMA"}, headers=api.headers)
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 2))
    [row] = api.get("/api/v1/watchlist")["results"]
    assert (row["id"], row["state"], row["note"]) == (flaky, "removed", "RMA")
