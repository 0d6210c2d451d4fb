"""Bad snapshots: a 422 (or 413) naming the field and the rule, and nothing changed at all."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from devicedeck.config import Settings

from .conftest import GPU, Api, MakeApi, dev, held, listandwatch, pod, podresources

LAW = "/api/v1/ingest/listandwatch"
PODRES = "/api/v1/ingest/podresources"


def good_law() -> dict[str, Any]:
    return listandwatch("node-a", [dev("gpu-0", numa=[0]), dev("gpu-1")], 2)


def good_podres() -> dict[str, Any]:
    return podresources(
        "node-a",
        [
            pod("p0", containers={"main": [held(GPU, "gpu-0", "gpu-1")]}),
            pod("p1", containers={"main": []}),
        ],
        2,
    )


@pytest.fixture
def seeded(api: Api) -> Api:
    """A node with devices and a pod, so a bad snapshot has something it could damage."""
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1"), dev("gpu-2")], 1))
    api.ingest_podresources(
        podresources("node-a", [pod("old", containers={"c": [held(GPU, "gpu-2")]})], 1)
    )
    return api


Edit = Callable[[dict[str, Any]], None]


def setter(path: str, value: Any) -> Edit:
    """An edit that sets a dotted path (list indexes as numbers) in a body."""

    def edit(body: dict[str, Any]) -> None:
        keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
        target: Any = body
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return edit


def deleter(path: str) -> Edit:
    def edit(body: dict[str, Any]) -> None:
        keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
        target: Any = body
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return edit


def append_device(device: dict[str, Any]) -> Edit:
    return lambda body: body["devices"].append(device)


LAW_CASES: dict[str, tuple[Edit, str, str]] = {
    "node upper case": (setter("node", "Node-A"), "node", "dns1123_subdomain"),
    "node underscore": (setter("node", "node_a"), "node", "dns1123_subdomain"),
    "node empty": (setter("node", ""), "node", "dns1123_subdomain"),
    "node too long": (setter("node", "n" * 254), "node", "dns1123_subdomain"),
    "resource without domain": (setter("resource", "gpu"), "resource", "extended_resource_name"),
    "resource in kubernetes.io": (
        setter("resource", "kubernetes.io/gpu"),
        "resource",
        "extended_resource_name",
    ),
    "resource starting requests.": (
        setter("resource", "requests.example.com/gpu"),
        "resource",
        "extended_resource_name",
    ),
    "resource name part too long": (
        setter("resource", "example.com/" + "g" * 64),
        "resource",
        "extended_resource_name",
    ),
    "resource upper-case domain": (
        setter("resource", "Example.com/gpu"),
        "resource",
        "extended_resource_name",
    ),
    "resource name part bad edge": (
        setter("resource", "example.com/gpu-"),
        "resource",
        "extended_resource_name",
    ),
    "empty device ID": (append_device(dev("")), "devices[2].ID", "device_id"),
    "overlong device ID": (append_device(dev("d" * 254)), "devices[2].ID", "device_id"),
    "device ID with newline": (append_device(dev("a\nb")), "devices[2].ID", "device_id"),
    "duplicate device ID": (append_device(dev("gpu-0")), "devices", "unique"),
    "naive observed_at": (
        setter("observed_at", "2026-12-02T12:00:00"),
        "observed_at",
        "timezone_aware",
    ),
    "observed_at not a time": (
        setter("observed_at", "yesterday"),
        "observed_at",
        "datetime_from_date_parsing",
    ),
    "missing source": (deleter("source"), "source", "missing"),
    "missing seq": (deleter("source.seq"), "source.seq", "missing"),
    "negative seq": (setter("source.seq", -1), "source.seq", "greater_than_equal"),
    "seq over int64": (setter("source.seq", 2**63), "source.seq", "less_than_equal"),
    "empty boot_id": (setter("source.boot_id", ""), "source.boot_id", "string_too_short"),
    "negative NUMA node": (
        setter("devices.0.topology.nodes.0.ID", -1),
        "devices[0].topology.nodes[0].ID",
        "greater_than_equal",
    ),
    "NUMA node not a number": (
        setter("devices.0.topology.nodes.0.ID", "zero"),
        "devices[0].topology.nodes[0].ID",
        "int_parsing",
    ),
    "health with NUL": (setter("devices.1.health", "Bad\x00"), "devices[1].health", "no_nul"),
    "boot_id with NUL": (setter("source.boot_id", "b\x00"), "source.boot_id", "no_nul"),
    "plugin endpoint with NUL": (
        setter("plugin", {"endpoint": "a\x00.sock"}),
        "plugin.endpoint",
        "no_nul",
    ),
    "observed_at before year 1 in UTC": (
        setter("observed_at", "0001-01-01T00:00:00+01:00"),
        "observed_at",
        "datetime_range",
    ),
    "devices missing": (deleter("devices"), "devices", "missing"),
    "devices not a list": (setter("devices", {"ID": "x"}), "devices", "list_type"),
}


def assert_refused(response: httpx.Response, field: str, rule: str, status: int = 422) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == ("invalid_input" if status == 422 else error["code"])
    assert isinstance(error["message"], str) and error["message"]
    pairs = [(d["field"], d["rule"]) for d in error["details"]]
    assert (field, rule) in pairs, pairs
    for detail in error["details"]:
        assert detail["message"]


def refuse_each(
    api: Api,
    db_rows: Callable[..., dict],
    path: str,
    good: Callable[[], dict[str, Any]],
    cases: dict[str, tuple[Edit, str, str]],
) -> None:
    """Posts each case against one seeded database (a database per case costs too much) and
    reports every case that was not refused whole."""
    before = db_rows()
    failures = []
    for name, (edit, field, rule) in cases.items():
        body = good()
        edit(body)
        try:
            assert_refused(api.post(path, body, expect=None), field, rule)
            assert db_rows() == before, "the database changed"
        except AssertionError as e:
            failures.append(f"{name}: {e}")
    assert not failures, "\n".join(failures)


def test_bad_listandwatch_snapshot_is_refused_whole(
    seeded: Api, db_rows: Callable[..., dict]
) -> None:
    refuse_each(seeded, db_rows, LAW, good_law, LAW_CASES)


def container(body: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = body["pod_resources"][0]["containers"][0]
    return result


def add_claim(claim: dict[str, Any]) -> Edit:
    def edit(body: dict[str, Any]) -> None:
        container(body)["dynamic_resources"] = [claim]

    return edit


GOOD_CLAIM = {
    "claim_name": "c",
    "claim_namespace": "ml",
    "claim_resources": [{"driver_name": "d.example.com", "pool_name": "p", "device_name": "x"}],
}


def claim_with(**changes: Any) -> dict[str, Any]:
    claim = copy.deepcopy(GOOD_CLAIM)
    claim.update(changes)
    return claim


PODRES_CASES: dict[str, tuple[Edit, str, str]] = {
    "node bad": (setter("node", "-node"), "node", "dns1123_subdomain"),
    "namespace upper case": (
        setter("pod_resources.0.namespace", "ML"),
        "pod_resources[0].namespace",
        "dns1123_label",
    ),
    "namespace too long": (
        setter("pod_resources.1.namespace", "n" * 64),
        "pod_resources[1].namespace",
        "dns1123_label",
    ),
    "pod name bad": (
        setter("pod_resources.0.name", "Pod_0"),
        "pod_resources[0].name",
        "dns1123_subdomain",
    ),
    "pod name empty": (
        setter("pod_resources.1.name", ""),
        "pod_resources[1].name",
        "dns1123_subdomain",
    ),
    "container name bad": (
        setter("pod_resources.0.containers.0.name", "Main"),
        "pod_resources[0].containers[0].name",
        "dns1123_label",
    ),
    "resource name bad": (
        setter("pod_resources.0.containers.0.devices.0.resource_name", "gpu"),
        "pod_resources[0].containers[0].devices[0].resource_name",
        "extended_resource_name",
    ),
    "empty device ID": (
        setter("pod_resources.0.containers.0.devices.0.device_ids", ["gpu-0", ""]),
        "pod_resources[0].containers[0].devices[0].device_ids[1]",
        "device_id",
    ),
    "overlong device ID": (
        setter("pod_resources.0.containers.0.devices.0.device_ids", ["x" * 254]),
        "pod_resources[0].containers[0].devices[0].device_ids[0]",
        "device_id",
    ),
    "duplicate pod": (
        lambda body: body["pod_resources"].append(pod("p0", containers={})),
        "pod_resources",
        "unique",
    ),
    "duplicate container": (
        lambda body: body["pod_resources"][0]["containers"].append({"name": "main"}),
        "pod_resources[0].containers",
        "unique",
    ),
    "naive observed_at": (
        setter("observed_at", "2026-12-02T12:00:00"),
        "observed_at",
        "timezone_aware",
    ),
    "missing source": (deleter("source"), "source", "missing"),
    "claim namespace bad": (
        add_claim(claim_with(claim_namespace="Bad")),
        "pod_resources[0].containers[0].dynamic_resources[0].claim_namespace",
        "dns1123_label",
    ),
    "claim without driver": (
        add_claim(claim_with(claim_resources=[{"pool_name": "p", "device_name": "x"}])),
        "pod_resources[0].containers[0].dynamic_resources[0].claim_resources[0].driver_name",
        "missing",
    ),
    "claim device with NUL": (
        add_claim(
            claim_with(
                claim_resources=[{"driver_name": "d", "pool_name": "p", "device_name": "x\x00"}]
            )
        ),
        "pod_resources[0].containers[0].dynamic_resources[0].claim_resources[0].device_name",
        "no_nul",
    ),
    "pod uid with NUL": (
        setter("pod_resources.0.uid", "u\x00"),
        "pod_resources[0].uid",
        "no_nul",
    ),
    "allocatable resource bad": (
        setter("allocatable", {"devices": [{"resource_name": "x", "device_ids": ["a"]}]}),
        "allocatable.devices[0].resource_name",
        "extended_resource_name",
    ),
}


def test_bad_podresources_snapshot_is_refused_whole(
    seeded: Api, db_rows: Callable[..., dict]
) -> None:
    refuse_each(seeded, db_rows, PODRES, good_podres, PODRES_CASES)


def test_the_good_bodies_of_these_cases_are_accepted(seeded: Api) -> None:
    """The bodies the cases break are valid as they are: a failure above is the edit's doing."""
    seeded.ingest_listandwatch(good_law())
    body = good_podres()
    add_claim(GOOD_CLAIM)(body)
    assert seeded.ingest_podresources(body)["allocated"] == 3


def test_snapshot_size_limits_come_from_the_settings(
    seeded: Api, make_api: MakeApi, db_rows: Callable[..., dict]
) -> None:
    small = make_api(max_devices_per_snapshot=3, max_pods_per_snapshot=2)
    before = db_rows()
    too_many = listandwatch("node-a", [dev(f"gpu-{i}") for i in range(4)], 5)
    assert_refused(small.post(LAW, too_many, expect=None), "devices", "too_long")
    pods = [pod(f"p{i}", containers={}) for i in range(3)]
    assert_refused(
        small.post(PODRES, podresources("node-a", pods, 5), expect=None),
        "pod_resources",
        "too_long",
    )
    held_too_many = [
        pod("p", containers={"a": [held(GPU, "g0", "g1")], "b": [held(GPU, "g2", "g3")]})
    ]
    assert_refused(
        small.post(PODRES, podresources("node-a", held_too_many, 5), expect=None),
        "pod_resources",
        "too_long",
    )
    assert db_rows() == before
    # At the limit is fine.
    small.ingest_listandwatch(listandwatch("node-a", [dev(f"gpu-{i}") for i in range(3)], 6))


def test_default_snapshot_limit_refuses_too_many_devices(seeded: Api) -> None:
    limit = Settings().max_devices_per_snapshot
    body = listandwatch("node-a", [dev(f"d{i}") for i in range(limit + 1)], 9)
    assert_refused(seeded.post(LAW, body, expect=None), "devices", "too_long")


def test_body_that_is_not_json_or_not_an_object(seeded: Api, db_rows: Callable[..., dict]) -> None:
    before = db_rows()
    headers = {**seeded.headers, "content-type": "application/json"}
    response = seeded.client.post(LAW, content=b'{"node": ', headers=headers)
    assert_refused(response, "body", "json_invalid")
    # Not even UTF-8: the same answer, not a bare 400.
    response = seeded.client.post(LAW, content=b"\xff\xfe{\x00", headers=headers)
    assert_refused(response, "body", "json_invalid")
    assert_refused(seeded.post(LAW, [good_law()], expect=None), "body", "model_attributes_type")
    assert db_rows() == before


def test_body_not_sent_as_json_is_415_naming_the_header(
    seeded: Api, db_rows: Callable[..., dict]
) -> None:
    """What `curl -d @snapshot.json` sends without `-H 'Content-Type: application/json'`."""
    before = db_rows()
    raw = json.dumps(good_law()).encode()
    for content_type in ("application/x-www-form-urlencoded", "text/plain", None):
        headers = dict(seeded.headers)
        if content_type:
            headers["content-type"] = content_type
        response = seeded.client.post(LAW, content=raw, headers=headers)
        assert_refused(response, "content-type", "media_type", status=415)
        error = response.json()["error"]
        assert error["code"] == "unsupported_media_type"
        assert "application/json" in error["message"]
        if content_type:
            assert content_type in error["details"][0]["message"]
    assert db_rows() == before
    # A charset parameter is still JSON.
    headers = {**seeded.headers, "content-type": "application/json; charset=utf-8"}
    assert seeded.client.post(LAW, content=raw, headers=headers).status_code == 200


@pytest.fixture
def small_body_api(make_api: MakeApi) -> Api:
    return make_api(body_limit=2048)


def padded(size: int) -> bytes:
    """A valid snapshot padded with spaces to exactly size bytes."""
    raw = json.dumps(listandwatch("node-z", [dev("gpu-0")], 1)).encode()
    assert len(raw) <= size
    return raw + b" " * (size - len(raw))


def assert_too_large(response: httpx.Response, limit: int) -> None:
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "payload_too_large"
    assert str(limit) in error["message"]
    assert error["details"] == [
        {"field": "body", "rule": "max_bytes", "message": f"must be at most {limit} bytes"}
    ]


def test_body_over_the_limit_with_declared_length_is_413(
    small_body_api: Api, db_rows: Callable[..., dict]
) -> None:
    before = db_rows()
    headers = {**small_body_api.headers, "content-type": "application/json"}
    response = small_body_api.client.post(LAW, content=padded(2049), headers=headers)
    assert_too_large(response, 2048)
    assert db_rows() == before
    ok = small_body_api.client.post(LAW, content=padded(2048), headers=headers)
    assert ok.status_code == 200, ok.text


def chunks(body: bytes, size: int = 500) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_streamed_body_over_the_limit_is_413(
    small_body_api: Api, db_rows: Callable[..., dict]
) -> None:
    before = db_rows()
    headers = {**small_body_api.headers, "content-type": "application/json"}
    response = small_body_api.client.post(LAW, content=chunks(padded(5000)), headers=headers)
    assert_too_large(response, 2048)
    assert db_rows() == before


def test_default_limit_is_three_mebibytes(seeded: Api) -> None:
    limit = 3 * 1024 * 1024
    assert Settings().body_limit == limit
    headers = {**seeded.headers, "content-type": "application/json"}
    assert_too_large(seeded.client.post(LAW, content=padded(limit + 1), headers=headers), limit)


def test_chunked_body_over_the_limit_is_413_from_a_real_server(
    settings: Settings, auth: dict[str, str], db_rows: Callable[..., dict]
) -> None:
    from devicedeck.main import create_app

    from .conftest import live_server

    before = db_rows()
    app = create_app(settings.model_copy(update={"body_limit": 2048}))
    headers = {**auth, "content-type": "application/json"}
    with live_server(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        streamed = http.post(LAW, content=chunks(padded(8000)), headers=headers)
        assert streamed.request.headers.get("transfer-encoding") == "chunked"
        assert_too_large(streamed, 2048)
        assert db_rows() == before
        fine = http.post(LAW, content=chunks(padded(2000)), headers=headers)
        assert fine.status_code == 200, fine.text
