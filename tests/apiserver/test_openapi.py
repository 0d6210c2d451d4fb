"""The OpenAPI documents of the simulated API server: every served kind is described, every
reference resolves, and each kind's PATCH operation carries what kubectl looks for."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from devicedeck.sim.apiserver import SimApiServer
from devicedeck.sim.apiserver.resources import RESOURCES

from .conftest import http


def references(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from references(value)
    elif isinstance(node, list):
        for item in node:
            yield from references(item)


def group_version(resource: Any) -> str:
    return f"apis/{resource.group}/{resource.version}" if resource.group else "api/v1"


def test_the_v3_index_points_at_one_document_per_group_version(api: SimApiServer) -> None:
    code, index = http(api, "GET", "/openapi/v3")
    assert code == 200
    assert {group_version(r) for r in RESOURCES} <= set(index["paths"])
    for path, entry in index["paths"].items():
        assert entry["serverRelativeURL"].startswith(f"/openapi/v3/{path}?hash=")
        code, document = http(api, "GET", entry["serverRelativeURL"])
        assert code == 200 and document["openapi"].startswith("3.")
        schemas = document["components"]["schemas"]
        for reference in references(document):
            assert reference.removeprefix("#/components/schemas/") in schemas, reference


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: r.qualified)
def test_each_kind_has_a_schema_and_a_patch_with_field_validation(
    api: SimApiServer, resource: Any
) -> None:
    document = http(api, "GET", f"/openapi/v3/{group_version(resource)}")[1]
    gvk = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    described = [
        s
        for s in document["components"]["schemas"].values()
        if gvk in s.get("x-kubernetes-group-version-kind", [])
    ]
    assert len(described) == 1
    assert described[0]["description"] and "metadata" in described[0]["properties"]
    patches = [
        item["patch"]
        for item in document["paths"].values()
        if "patch" in item and item["patch"]["x-kubernetes-group-version-kind"] == gvk
    ]
    assert patches
    for patch in patches:
        names = {(p["name"], p["in"]) for p in patch["parameters"]}
        assert ("fieldValidation", "query") in names and ("dryRun", "query") in names


def test_the_v2_document_resolves_its_references(api: SimApiServer) -> None:
    code, document = http(api, "GET", "/openapi/v2")
    assert code == 200 and document["swagger"] == "2.0"
    for reference in references(document):
        assert reference.removeprefix("#/definitions/") in document["definitions"], reference
    node = document["definitions"]["io.k8s.api.core.v1.NodeSpec"]["properties"]
    assert node["unschedulable"]["type"] == "boolean"
    assert node["taints"]["items"] == {"$ref": "#/definitions/io.k8s.api.core.v1.Taint"}


def test_the_v2_document_in_protobuf_as_client_go_asks_for_it(api: SimApiServer) -> None:
    request = urllib.request.Request(
        api.url + "/openapi/v2",
        headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"] == (
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        )
        body = response.read()
    # Field 1 (swagger), length-delimited: "2.0"; the definitions' names appear as written.
    assert body.startswith(b"\n\x032.0")
    assert b"io.k8s.api.core.v1.NodeSpec" in body


def test_an_unknown_document_is_not_found(api: SimApiServer) -> None:
    assert http(api, "GET", "/openapi/v3/apis/example.com/v1")[0] == 404


def test_unknown_fields_are_refused_warned_about_or_ignored(api: SimApiServer) -> None:
    body: dict[str, Any] = {
        "metadata": {"name": "settings", "colour": "blue"},
        "data": {"a": "b"},
        "extra": 1,
    }
    path = "/api/v1/namespaces/ml/configmaps"
    code, status = http(api, "POST", f"{path}?fieldValidation=Strict", body)
    assert code == 400
    assert 'unknown field "metadata.colour"' in status["message"]
    assert 'unknown field "extra"' in status["message"]
    assert http(api, "GET", f"{path}/settings")[0] == 404
    code, status = http(api, "POST", f"{path}?fieldValidation=Sloppy", body)
    assert code == 422 and status["details"]["causes"][0]["field"] == "fieldValidation"
    assert http(api, "POST", f"{path}?fieldValidation=Ignore", body)[0] == 201
