"""The watch list on the dashboard: the device page's mark control (admin scope), the
/watchlist page, and a refused change that changes nothing."""

from __future__ import annotations

import re
from collections.abc import Callable

from fastapi.testclient import TestClient

from .conftest import Ingest, dev
from .dom import Element, parse
from .signin import sign_in

MakeToken = Callable[..., str]
ORIGIN = {"Origin": "http://testserver"}


def _device_pk(client: TestClient, auth: dict[str, str], device_id: str) -> int:
    found = client.get("/api/v1/devices", params={"q": device_id}, headers=auth).json()
    [device] = [d for d in found["results"] if d["device_id"] == device_id]
    return int(device["id"])


def _with_class(page: str, name: str) -> Element:
    [found] = parse(page).find_all(predicate=lambda e: e.has_class(name))
    return found


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def test_an_admin_marks_and_unmarks_a_device_from_its_page(
    client: TestClient, ingest: Ingest, auth: dict[str, str], make_token: MakeToken
) -> None:
    ingest.devices("node-a", [dev("gpu-0"), dev("gpu-7", "Unhealthy")])
    pk = _device_pk(client, auth, "gpu-7")
    sign_in(client, make_token("read", "admin", name="alice"))
    page = client.get(f"/devices/{pk}").text
    assert "Not marked for return." in page
    form = {"csrf_token": _csrf(page), "action": "mark", "note": "XID 79 twice today"}
    done = client.post(
        f"/devices/{pk}/watchlist", data=form, headers=ORIGIN, follow_redirects=False
    )
    assert done.status_code == 303 and done.headers["location"] == f"/devices/{pk}"
    card = _with_class(client.get(f"/devices/{pk}").text, "watch")
    assert "Marked for return" in card.text and "alice" in card.text
    assert "XID 79 twice today" in card.text
    listed = _with_class(client.get("/watchlist").text, "watchlist-table")
    assert "gpu-7" in listed.text and "XID 79 twice today" in listed.text
    assert client.get("/watchlist").text.count('href="/api/v1/watchlist?format=csv"') == 1
    form["action"] = "unmark"
    client.post(f"/devices/{pk}/watchlist", data=form, headers=ORIGIN, follow_redirects=False)
    assert "No device is marked for return" in client.get("/watchlist").text


def test_a_reader_sees_the_mark_but_cannot_change_it(
    client: TestClient, ingest: Ingest, auth: dict[str, str], make_token: MakeToken
) -> None:
    ingest.devices("node-a", [dev("gpu-7", "Unhealthy")])
    pk = _device_pk(client, auth, "gpu-7")
    client.put(f"/api/v1/watchlist/{pk}", json={"note": "RMA"}, headers=auth)
    sign_in(client, make_token("read", name="bob"))
    page = client.get(f"/devices/{pk}").text
    card = _with_class(page, "watch")
    assert "Marked for return" in card.text and "RMA" in card.text
    assert "takes the admin scope" in card.text
    assert f'action="/devices/{pk}/watchlist"' not in page
    form = {"csrf_token": _csrf(page), "action": "unmark"}
    refused = client.post(f"/devices/{pk}/watchlist", data=form, headers=ORIGIN)
    assert refused.status_code == 403
    assert len(client.get("/api/v1/watchlist", headers=auth).json()["results"]) == 1


def test_a_bad_note_is_refused_naming_the_field(
    client: TestClient, ingest: Ingest, auth: dict[str, str], make_token: MakeToken
) -> None:
    ingest.devices("node-a", [dev("gpu-7")])
    pk = _device_pk(client, auth, "gpu-7")
    sign_in(client, make_token("admin", name="alice"))
    page = client.get(f"/devices/{pk}").text
    form = {"csrf_token": _csrf(page), "action": "mark", "note": "x" * 501}
    refused = client.post(f"/devices/{pk}/watchlist", data=form, headers=ORIGIN)
    assert refused.status_code == 422
    assert "note" in refused.text and "max_length" in refused.text
    gone = client.post("/devices/99999/watchlist", data={**form, "note": ""}, headers=ORIGIN)
    assert gone.status_code == 404
    assert client.get("/api/v1/watchlist", headers=auth).json()["results"] == []
