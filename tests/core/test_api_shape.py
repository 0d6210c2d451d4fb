"""One list envelope and one error shape for every route, and paging without gaps or repeats."""

from __future__ import annotations

import re
from typing import Any

import httpx
from fastapi.testclient import TestClient

from .conftest import GPU, NIC, Api, MakeApi, dev, held, listandwatch, pod, podresources


def api_operations(client: TestClient) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, operation) for every operation under /api/v1 in the app's OpenAPI."""
    schema = client.get("/openapi.json").json()
    return [
        (method.upper(), path, operation)
        for path, item in schema["paths"].items()
        if path.startswith("/api/v1/")
        for method, operation in item.items()
    ]


def is_list(operation: dict[str, Any], schema: dict[str, Any]) -> bool:
    content = operation["responses"].get("200", {}).get("content", {})
    ref = content.get("application/json", {}).get("schema", {}).get("$ref", "")
    if not ref:
        return False
    component = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return set(component.get("properties", {})) == {"results", "next", "count", "count_exact"}


def fill(path: str) -> str:
    """A concrete path for a template: numbers for ids, names elsewhere."""
    return re.sub(r"\{(\w*id\w*)\}", "1", re.sub(r"\{(?!\w*id\w*\})\w+\}", "x", path))


def assert_error_shape(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.request.url, response.text)
    body = response.json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert set(error) == {"code", "message", "details"}
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["details"], list)
    for detail in error["details"]:
        assert set(detail) == {"field", "rule", "message"}
        assert all(isinstance(v, str) and v for v in detail.values())
    return error


def test_every_api_route_refuses_a_missing_token_in_the_error_shape(client: TestClient) -> None:
    operations = api_operations(client)
    assert len(operations) >= 12
    for method, path, _ in operations:
        response = client.request(method, fill(path), json={})
        error = assert_error_shape(response, 401)
        assert error["code"] == "unauthorized"


def test_every_json_body_route_says_so_when_sent_a_form(api: Api) -> None:
    body_routes = [
        (method, path, operation)
        for method, path, operation in api_operations(api.client)
        if "requestBody" in operation
    ]
    assert len(body_routes) >= 4
    headers = {**api.headers, "content-type": "application/x-www-form-urlencoded"}
    for method, path, operation in body_routes:
        assert "415" in operation["responses"], (method, path)
        response = api.client.request(method, fill(path), content=b"name=x", headers=headers)
        error = assert_error_shape(response, 415)
        assert error["code"] == "unsupported_media_type"
        assert [(d["field"], d["rule"]) for d in error["details"]] == [
            ("content-type", "media_type")
        ]


def populate(api: Api, nodes: int = 3) -> None:
    for n in range(nodes):
        node = f"node-{n:02d}"
        api.ingest_listandwatch(
            listandwatch(node, [dev("gpu-0"), dev("gpu-1", "Unhealthy"), dev("gpu-2")], 1)
        )
        api.ingest_listandwatch(listandwatch(node, [dev("nic-0")], 1, resource=NIC))
        pods = [pod(f"job-{n:02d}", containers={"main": [held(GPU, "gpu-0")]})]
        api.ingest_podresources(podresources(node, pods, 1))


def test_every_list_route_answers_the_envelope(api: Api) -> None:
    populate(api)
    schema = api.client.get("/openapi.json").json()
    lists = [
        path
        for method, path, operation in api_operations(api.client)
        if method == "GET" and "{" not in path and is_list(operation, schema)
    ]
    core = [f"/api/v1/{name}" for name in ("nodes", "devices", "pods", "resources", "events")]
    core.append("/api/v1/tokens")
    assert set(core) <= set(lists)
    for path in lists:
        body = api.get(path)
        assert set(body) == {"results", "next", "count", "count_exact"}, path
        assert body["count_exact"] is True, path
        assert isinstance(body["results"], list), path
        assert body["count"] is None or body["count"] >= len(body["results"])
    for path in core:
        body = api.get(path)
        assert body["results"], path
        if path == "/api/v1/tokens":
            assert body["next"] is None and body["count"] == len(body["results"])
            continue
        page = api.get(path, limit=1)
        assert len(page["results"]) == 1, path
        assert page["next"] is not None and page["next"].startswith(path + "?"), path
        assert "cursor=" in page["next"]


def test_every_list_route_refuses_a_bad_limit_and_cursor(api: Api) -> None:
    schema = api.client.get("/openapi.json").json()
    for method, path, operation in api_operations(api.client):
        if method != "GET" or "{" in path or not is_list(operation, schema):
            continue
        params = {p["name"] for p in operation.get("parameters", [])}
        if "limit" in params:
            for limit, rule in ((0, "greater_than_equal"), (1001, "less_than_equal")):
                error = assert_error_shape(
                    api.client.get(path, params={"limit": limit}, headers=api.headers), 422
                )
                assert ("limit", rule) in [(d["field"], d["rule"]) for d in error["details"]]
            error = assert_error_shape(
                api.client.get(path, params={"limit": "ten"}, headers=api.headers), 422
            )
            assert error["details"][0]["field"] == "limit"
        if "cursor" in params:
            for cursor in ("not-a-cursor", "e30", "W10", "eyJzIjoibm9kZSJ9"):
                error = assert_error_shape(
                    api.client.get(path, params={"cursor": cursor}, headers=api.headers), 422
                )
                assert [d["field"] for d in error["details"]] == ["cursor"], (path, cursor)


def test_error_shape_for_not_found_and_bad_path_and_method(api: Api) -> None:
    populate(api, 1)
    for path in (
        "/api/v1/nodes/no-such-node",
        "/api/v1/devices/999999",
        "/api/v1/pods/ml/no-such-pod",
        "/api/v1/nothing-here",
    ):
        error = assert_error_shape(api.client.get(path, headers=api.headers), 404)
        assert error["code"] == "not_found"
    error = assert_error_shape(api.client.delete("/api/v1/tokens/nobody", headers=api.headers), 404)
    assert error["code"] == "not_found"
    # A plugin's device ID in place of the API's id: the error names `id`, not `device_id`.
    error = assert_error_shape(
        api.client.get("/api/v1/devices/GPU-3cd8ff23", headers=api.headers), 422
    )
    assert [(d["field"], d["rule"]) for d in error["details"]] == [("id", "int_parsing")]
    error = assert_error_shape(api.client.delete("/api/v1/devices", headers=api.headers), 405)
    assert error["code"] == "method_not_allowed"
    error = assert_error_shape(
        api.client.get("/api/v1/devices", params={"sort": "price"}, headers=api.headers), 422
    )
    assert [(d["field"], d["rule"]) for d in error["details"]] == [("sort", "enum")]


def test_detail_routes_answer_the_item(api: Api) -> None:
    populate(api, 1)
    device = api.get("/api/v1/devices", node="node-00", q="gpu-0")["results"][0]
    detail = api.get(f"/api/v1/devices/{device['id']}")
    for key in ("id", "node", "resource", "device_id", "health", "state", "numa_nodes"):
        assert detail[key] == device[key]
    assert detail["allocation"] == {
        "namespace": "ml",
        "pod": "job-00",
        "container": "main",
        "pod_uid": None,
        "started": detail["allocation"]["started"],
    }
    node = api.get("/api/v1/nodes/node-00")
    assert node["resources"][GPU] == {
        "devices": 3,
        "healthy": 2,
        "unhealthy": 1,
        "unknown": 0,
        "allocated": 1,
        "free": 1,
    }
    assert node["stale"] is False
    got = api.get("/api/v1/pods/ml/job-00")
    assert got["node"] == "node-00"
    assert got["containers"][0]["devices"][0]["device_id"] == "gpu-0"


# Pagination ---------------------------------------------------------------------------------


def many(api: Api) -> None:
    """23 nodes, 9 resources, ~100 devices, 30 pods, a few hundred events."""
    for n in range(23):
        node = f"node-{n:02d}"
        resource = f"example.com/r{n % 9}"
        health = ["Healthy", "Unhealthy", "XID"]
        devices = [dev(f"d-{i}", health[(n + i) % 3]) for i in range(3)]
        api.ingest_listandwatch(listandwatch(node, devices, 1, resource=resource))
        if n % 2 == 0:
            api.ingest_listandwatch(listandwatch(node, [dev("gpu-0"), dev(f"gpu-{n:02d}")], 1))
        pods = [
            pod(f"p-{n:02d}-{k}", namespace=f"ns-{k}", containers={"c": [held(resource, f"d-{k}")]})
            for k in range(2 if n < 15 else 0)
        ]
        api.ingest_podresources(podresources(node, pods, 1))


def assert_pages_cover(api: Api, path: str, limit: int, **params: Any) -> list[dict[str, Any]]:
    everything = api.get(path, limit=1000, **params)
    full = everything["results"]
    assert everything["next"] is None
    paged = api.all_pages(path, limit=limit, **params)
    assert paged == full, (path, params)
    pages = api.get(path, limit=limit, **params)
    assert len(pages["results"]) == min(limit, len(full))
    if everything["count"] is not None:
        assert everything["count"] == len(full) == pages["count"]
    assert len(full) > 2 * limit, (path, len(full))
    return full


def keys(items: list[dict[str, Any]], *names: str) -> list[tuple[Any, ...]]:
    return [tuple(item[name] for name in names) for item in items]


DEVICE_SORT_KEYS = {
    "node": ("node", "resource", "device_id", "id"),
    "resource": ("resource", "node", "device_id", "id"),
    "device_id": ("device_id", "id"),
    "health": ("health", "node", "resource", "device_id", "id"),
    "id": ("id",),
}


def test_paging_has_no_gaps_or_repeats(api: Api) -> None:
    many(api)
    devices = "/api/v1/devices"
    for sort, names in DEVICE_SORT_KEYS.items():
        ascending = assert_pages_cover(api, devices, 7, sort=sort)
        assert keys(ascending, *names) == sorted(keys(ascending, *names)), sort
        assert len({d["id"] for d in ascending}) == len(ascending)
        descending = assert_pages_cover(api, devices, 7, sort=f"-{sort}")
        assert keys(descending, *names) == sorted(keys(ascending, *names), reverse=True), sort
    assert len(assert_pages_cover(api, devices, 5, state="any", health="Unhealthy")) > 10

    nodes = assert_pages_cover(api, "/api/v1/nodes", 4)
    assert [n["name"] for n in nodes] == [f"node-{n:02d}" for n in range(23)]
    by_name_desc = assert_pages_cover(api, "/api/v1/nodes", 4, sort="-name")
    assert [n["name"] for n in by_name_desc] == [f"node-{n:02d}" for n in reversed(range(23))]
    for sort in ("last_seen", "-last_seen"):
        seen = assert_pages_cover(api, "/api/v1/nodes", 4, sort=sort)
        order = keys(seen, "last_seen", "name")
        assert order == sorted(order, reverse=sort.startswith("-"))

    pods = assert_pages_cover(api, "/api/v1/pods", 4)
    assert len(pods) == 30
    assert keys(pods, "namespace", "name") == sorted(keys(pods, "namespace", "name"))

    resources = api.all_pages("/api/v1/resources", limit=2)
    assert [r["resource"] for r in resources] == sorted(
        [GPU] + [f"example.com/r{i}" for i in range(9)]
    )
    assert resources == api.get("/api/v1/resources", limit=1000)["results"]

    events = assert_pages_cover(api, "/api/v1/events", 25)
    ids = [e["id"] for e in events]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
    assert len(assert_pages_cover(api, "/api/v1/events", 3, kind="allocated")) == 30


def test_a_cursor_is_bound_to_its_sort(api: Api) -> None:
    populate(api, 1)
    first = api.get("/api/v1/devices", limit=3, sort="node")
    cursor = first["next"].split("cursor=")[1]
    response = api.client.get(
        "/api/v1/devices", params={"sort": "id", "cursor": cursor}, headers=api.headers
    )
    error = assert_error_shape(response, 422)
    assert error["details"][0]["field"] == "cursor"


def test_next_link_keeps_the_filters(api: Api) -> None:
    populate(api, 5)
    page = api.get("/api/v1/devices", limit=2, health="Unhealthy", sort="-id")
    assert "health=Unhealthy" in page["next"] and "sort=-id" in page["next"]
    followed = api.all_pages("/api/v1/devices", limit=2, health="Unhealthy", sort="-id")
    assert {d["health"] for d in followed} == {"Unhealthy"}


def test_limit_bounds_are_inclusive_and_the_default_is_50(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev(f"d-{i:02d}") for i in range(60)], 1))
    for limit in (1, 50, 1000):
        page = api.get("/api/v1/devices", limit=limit)
        assert len(page["results"]) == min(limit, 60)
    default = api.get("/api/v1/devices")
    assert len(default["results"]) == 50 and default["count"] == 60
    assert default["next"] is not None


# Hostile parameters ---------------------------------------------------------------------------


def details(response: httpx.Response) -> list[tuple[str, str]]:
    error = assert_error_shape(response, 422)
    return [(d["field"], d["rule"]) for d in error["details"]]


def test_nul_characters_in_parameters_are_422(api: Api) -> None:
    populate(api, 1)
    get = api.client.get
    for path in ("/api/v1/devices", "/api/v1/nodes", "/api/v1/pods", "/api/v1/events"):
        for name in ("node", "q"):
            if name == "q" and path == "/api/v1/events":
                continue
            response = get(path, params={name: "a\x00b"}, headers=api.headers)
            assert details(response) == [(name, "no_nul")], path
    assert details(get("/api/v1/nodes/a%00b", headers=api.headers)) == [("name", "no_nul")]
    assert details(get("/api/v1/pods/ml/p%00", headers=api.headers)) == [("name", "no_nul")]
    response = api.client.delete("/api/v1/tokens/x%00", headers=api.headers)
    assert details(response) == [("name", "no_nul")]
    response = api.client.post(
        "/api/v1/tokens", json={"name": "x\x00", "scopes": ["read"]}, headers=api.headers
    )
    assert details(response) == [("name", "printable")]


def test_ids_beyond_the_database_range_are_422(api: Api) -> None:
    for value in (2**63, 2**70, 0, -1):
        response = api.client.get(f"/api/v1/devices/{value}", headers=api.headers)
        assert [field for field, _ in details(response)] == ["id"], value
        response = api.client.get("/api/v1/events", params={"device": value}, headers=api.headers)
        assert [field for field, _ in details(response)] == ["device"], value
    assert api.client.get(f"/api/v1/devices/{2**63 - 1}", headers=api.headers).status_code == 404


FORGED_CURSORS = [
    ("/api/v1/devices", {}, "node", [1, 2, 3, "x"]),
    ("/api/v1/devices", {}, "node", ["a", "b", "c", "7"]),
    ("/api/v1/devices", {"sort": "id"}, "id", [2**70]),
    ("/api/v1/devices", {"sort": "id"}, "id", [True]),
    ("/api/v1/devices", {"sort": "-health"}, "-health", [{"a": 1}, "n", "r", "d", 1]),
    ("/api/v1/devices", {"sort": "health"}, "health", ["Sick", "n", "r", "d", 1]),
    ("/api/v1/devices", {"sort": "health"}, "health", ["Healthy", "n", "r", "d", "1"]),
    ("/api/v1/devices", {"sort": "attention"}, "attention", [True, "n", "r", "d", 1]),
    ("/api/v1/devices", {"sort": "-attention"}, "-attention", [7, "n", "r", "d", 1]),
    ("/api/v1/devices", {"sort": "device_id"}, "device_id", ["x\x00", 1]),
    ("/api/v1/nodes", {}, "name", [None]),
    ("/api/v1/nodes", {"sort": "last_seen"}, "last_seen", ["yesterday", "n"]),
    ("/api/v1/nodes", {"sort": "last_seen"}, "last_seen", ["2026-12-02T10:00:00", "n"]),
    ("/api/v1/nodes", {"sort": "last_seen"}, "last_seen", ["0001-01-01T00:00:00+05:00", "n"]),
    ("/api/v1/nodes", {"sort": "last_seen"}, "last_seen", [17, "n"]),
    ("/api/v1/pods", {}, "pod", [["ml"], "p"]),
    ("/api/v1/resources", {}, "resource", [5]),
    ("/api/v1/events", {}, "-id", ["abc"]),
    ("/api/v1/events", {}, "-id", [2**64]),
]


def test_forged_cursors_are_422_not_5xx(api: Api) -> None:
    from devicedeck.inventory.read.pagination import encode_cursor

    populate(api, 1)
    for path, params, sort, values in FORGED_CURSORS:
        cursor = encode_cursor(sort, values)
        response = api.client.get(path, params={**params, "cursor": cursor}, headers=api.headers)
        assert details(response) == [("cursor", "cursor")], (path, sort, values)


def test_since_outside_the_utc_range_is_422(api: Api) -> None:
    for since in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        response = api.client.get("/api/v1/events", params={"since": since}, headers=api.headers)
        assert details(response) == [("since", "range")], since
    ok = api.client.get(
        "/api/v1/events", params={"since": "0001-01-01T00:00:00Z"}, headers=api.headers
    )
    assert ok.status_code == 200


def test_next_link_is_relative_or_under_the_public_url_never_from_host(
    api: Api, make_api: MakeApi
) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    spoofed = {**api.headers, "Host": "evil.example"}
    page = api.client.get("/api/v1/devices", params={"limit": 1}, headers=spoofed).json()
    assert page["next"].startswith("/api/v1/devices?") and "evil" not in page["next"]
    public = make_api(public_url="https://devicedeck.example.com/")
    page = public.client.get("/api/v1/devices", params={"limit": 1}, headers=spoofed).json()
    assert page["next"].startswith("https://devicedeck.example.com/api/v1/devices?")
    assert public.client.get(page["next"], headers=public.headers).json()["results"]
