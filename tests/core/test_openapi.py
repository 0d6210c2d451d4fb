"""The OpenAPI document as a client generator reads it: chosen operation IDs, the security each
operation really enforces, enums for the closed vocabularies, and an example on every
response schema that matches that schema."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, get_args

import jsonschema_rs
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.api import vocabulary
from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, KubeMode, Settings
from devicedeck.credentials.dashboard_sessions import SessionLimits, start_session
from devicedeck.credentials.tokens import SCOPES, authenticate
from devicedeck.db import write_session
from devicedeck.inventory.dra.health_reports import SOURCE as STREAM_SOURCE
from devicedeck.inventory.events import EVENT_KINDS
from devicedeck.inventory.fields import HEALTH_VALUES, PRESENT, REMOVED, UNHEALTHY_OR_REMOVED
from devicedeck.inventory.read.node_status import DEVICE_PLUGIN, MANUAL
from devicedeck.kube.dra_health import CLAIM_STATUS, POD_STATUS
from devicedeck.main import create_app

from .conftest import Api

OPERATIONS = {
    ("POST", "/api/v1/ingest/listandwatch"): "ingestListAndWatch",
    ("POST", "/api/v1/ingest/podresources"): "ingestPodResources",
    ("POST", "/api/v1/ingest/dra-health"): "ingestDraHealth",
    ("GET", "/livez"): "livez",
    ("GET", "/readyz"): "readyz",
    ("GET", "/metrics"): "metrics",
    ("GET", "/api/v1/nodes"): "listNodes",
    ("GET", "/api/v1/nodes/{name}"): "getNode",
    ("GET", "/api/v1/devices"): "listDevices",
    ("GET", "/api/v1/devices/{id}"): "getDevice",
    ("GET", "/api/v1/pods"): "listPods",
    ("GET", "/api/v1/pods/{namespace}/{name}"): "getPod",
    ("GET", "/api/v1/resources"): "listResources",
    ("GET", "/api/v1/events"): "listEvents",
    ("GET", "/api/v1/reliability/devices"): "listReliabilityDevices",
    ("GET", "/api/v1/reliability/devices/{id}"): "getDeviceReliability",
    ("GET", "/api/v1/reliability/nodes"): "listReliabilityNodes",
    ("GET", "/api/v1/reliability/resources"): "listReliabilityResources",
    ("GET", "/api/v1/reliability/labels"): "listReliabilityByLabel",
    ("GET", "/api/v1/tokens"): "listTokens",
    ("POST", "/api/v1/tokens"): "createToken",
    ("DELETE", "/api/v1/tokens/{name}"): "revokeToken",
    ("GET", "/api/v1/watchlist"): "listWatchlist",
    ("GET", "/api/v1/watchlist/{id}"): "getWatchlistEntry",
    ("PUT", "/api/v1/watchlist/{id}"): "markDevice",
    ("DELETE", "/api/v1/watchlist/{id}"): "unmarkDevice",
    ("GET", "/api/v1/cluster/status"): "getClusterStatus",
    ("GET", "/api/v1/cluster/pods"): "listClusterPods",
    ("GET", "/api/v1/dra/devices"): "listDraDevices",
    ("GET", "/api/v1/dra/drivers/{driver}/pools/{pool}/devices/{device}"): "getDraDevice",
    ("PUT", "/api/v1/nodes/{node}/extended-resources/{resource}"): "setExtendedResource",
    ("DELETE", "/api/v1/nodes/{node}/extended-resources/{resource}"): "removeExtendedResource",
}
PUBLIC = {"livez", "readyz", "metrics"}
# For each scope, one that does not include it (admin includes every scope).
LACKING = {"read": "ingest", "ingest": "read", "admin": "read"}
SESSION_COOKIE = "devicedeck_session"


def operations(schema: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """operationId -> (method, path, operation)."""
    found: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            found[operation["operationId"]] = (method.upper(), path, operation)
    return found


def concrete(path: str) -> str:
    return re.sub(r"\{id\}", "1", re.sub(r"\{(?!id\})\w+\}", "x", path))


def test_every_operation_has_its_chosen_operation_id(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    ids = [
        ((method.upper(), path), operation.get("operationId"))
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    ]
    assert dict(ids) == OPERATIONS
    assert len({operation_id for _, operation_id in ids}) == len(ids)


def test_security_schemes_are_the_bearer_token_and_the_session_cookie(client: TestClient) -> None:
    schemes = client.get("/openapi.json").json()["components"]["securitySchemes"]
    assert {
        name: {k: v for k, v in s.items() if k != "description"} for name, s in schemes.items()
    } == {
        "bearerToken": {"type": "http", "scheme": "bearer"},
        "sessionCookie": {"type": "apiKey", "in": "cookie", "name": SESSION_COOKIE},
    }


def signed_in(session_factory: sessionmaker[Session], token: str) -> str:
    """A dashboard session for the token, as signing in at /login starts one: its cookie."""
    now = utcnow()
    with write_session(session_factory) as session:
        found = authenticate(session, token, now)
        assert found is not None
        limits = SessionLimits(idle=timedelta(hours=1), max_age=timedelta(hours=1))
        return start_session(session, found.token_id, now, limits)


def test_each_operation_declares_the_security_it_enforces(
    api: Api, make_token: Any, session_factory: sessionmaker[Session]
) -> None:
    schema = api.client.get("/openapi.json").json()
    lacking = {scope: make_token(other) for scope, other in LACKING.items()}
    admin = signed_in(session_factory, make_token("admin"))
    for operation_id, (method, path, operation) in operations(schema).items():
        url = concrete(path)
        if operation_id in PUBLIC:
            assert "security" not in operation, operation_id
            assert api.client.request(method, url).status_code == 200, operation_id
            continue
        [scope] = operation["security"][0]["bearerToken"]
        assert operation["security"] == [{"bearerToken": [scope]}, {"sessionCookie": [scope]}]
        anonymous = api.client.request(method, url, json={})
        assert anonymous.status_code == 401, (operation_id, anonymous.text)
        weaker = {"Authorization": f"Bearer {lacking[scope]}"}
        refused = api.client.request(method, url, json={}, headers=weaker)
        assert refused.status_code == 403, (operation_id, refused.text)
        # The cookie alone is enough: past authentication, whatever the route then answers.
        api.client.cookies.set(SESSION_COOKIE, admin)
        try:
            by_cookie = api.client.request(method, url, json={})
        finally:
            api.client.cookies.clear()
        assert by_cookie.status_code not in (401, 403), (operation_id, by_cookie.text)
    assert set(operations(schema)) > PUBLIC


def test_with_authentication_off_reading_needs_no_credentials() -> None:
    settings = Settings(database_url="sqlite:///unused.db", auth=AuthMode.OFF)
    schema = create_app(settings).openapi()
    for operation_id, (_, _, operation) in operations(schema).items():
        if operation_id in PUBLIC:
            continue
        optional = {} in operation["security"]
        assert optional == (operation["security"][0]["bearerToken"] == ["read"]), operation_id


def test_the_vocabularies_are_the_domains_own() -> None:
    assert get_args(vocabulary.Health) == HEALTH_VALUES
    assert get_args(vocabulary.ReportedHealth) == HEALTH_VALUES
    assert get_args(vocabulary.DeviceState) == (PRESENT, REMOVED)
    assert get_args(vocabulary.DevicePresence) == (PRESENT, REMOVED, UNHEALTHY_OR_REMOVED)
    assert get_args(vocabulary.Scope) == SCOPES
    assert get_args(vocabulary.KubeModeName) == tuple(KubeMode)
    assert get_args(vocabulary.ExtendedSource) == (DEVICE_PLUGIN, MANUAL)
    assert get_args(vocabulary.DraHealthSource) == (POD_STATUS, CLAIM_STATUS, STREAM_SOURCE)


def enum_of(schema: dict[str, Any]) -> list[str]:
    """The enum of a string schema, or of the string branch of `string | null`."""
    for branch in schema.get("anyOf", [schema]):
        if "enum" in branch:
            return list(branch["enum"])
    raise AssertionError(f"no enum in {schema}")


def test_closed_vocabularies_are_enums(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    found = operations(schema)

    def parameter(operation_id: str, name: str) -> list[str]:
        _, _, operation = found[operation_id]
        [param] = [p for p in operation["parameters"] if p["name"] == name]
        return enum_of(param["schema"])

    health = list(HEALTH_VALUES)
    assert parameter("listDevices", "health") == health
    assert parameter("listDraDevices", "health") == health
    assert parameter("listDevices", "state") == [PRESENT, REMOVED, UNHEALTHY_OR_REMOVED, "any"]
    assert parameter("listEvents", "kind") == list(EVENT_KINDS)
    assert parameter("listNodes", "sort") == ["name", "-name", "last_seen", "-last_seen"]
    device_sorts = parameter("listDevices", "sort")
    assert {"node", "-node", "attention", "-attention", "health_since", "id"} <= set(device_sorts)
    assert len(device_sorts) == 16

    components = schema["components"]["schemas"]

    def field(component: str, name: str) -> list[str]:
        return enum_of(components[component]["properties"][name])

    assert field("DeviceOut", "health") == health
    assert field("DeviceOut", "state") == [PRESENT, REMOVED]
    assert field("PodDeviceOut", "health") == health
    assert field("EventOut", "kind") == list(EVENT_KINDS)
    assert field("HealthPoint", "kind") == list(EVENT_KINDS)
    assert field("DraHealthOut", "health") == ["Healthy", "Unhealthy", "Unknown"]
    assert field("DraHealthOut", "source") == ["pod_status", "claim_status", "kubelet_dra_health"]
    assert field("PodDraDeviceOut", "health") == ["Healthy", "Unhealthy", "Unknown"]
    assert field("ExtendedResourceOut", "source") == ["device_plugin", "manual"]
    assert field("ClusterStatusOut", "mode") == ["off", "incluster", "kubeconfig"]
    assert enum_of(components["TokenOut"]["properties"]["scopes"]["items"]) == list(SCOPES)
    assert enum_of(components["NewToken"]["properties"]["scopes"]["items"]) == list(SCOPES)


def test_enum_parameters_keep_the_domains_checks(api: Api) -> None:
    """Published as enums, still checked by the domain: any letter case where it allowed it,
    and a wrong value is the 422 that names the field and lists the choices."""
    assert api.get("/api/v1/devices", health="unhealthy", state="PRESENT")["results"] == []
    for path, name, value in (
        ("/api/v1/devices", "health", "Sick"),
        ("/api/v1/devices", "state", "gone"),
        ("/api/v1/devices", "sort", "-color"),
        ("/api/v1/nodes", "sort", "devices"),
        ("/api/v1/events", "kind", "exploded"),
        ("/api/v1/dra/devices", "health", "healthy"),
    ):
        error = api.get(path, expect=422, **{name: value})["error"]
        [detail] = error["details"]
        assert (detail["field"], detail["rule"]) == (name, "enum"), (path, error)
        assert "must be one of" in detail["message"]


def referenced(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        found = set()
        ref = schema.get("$ref")
        if isinstance(ref, str):
            found.add(ref.rsplit("/", 1)[-1])
        for value in schema.values():
            found |= referenced(value)
        return found
    if isinstance(schema, list):
        return set().union(*(referenced(value) for value in schema)) if schema else set()
    return set()


def response_components(schema: dict[str, Any]) -> set[str]:
    """Every component a response can contain, nested ones included."""
    components = schema["components"]["schemas"]
    responses = [
        operation["responses"] for item in schema["paths"].values() for operation in item.values()
    ]
    todo = referenced(responses)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        seen.add(name)
        todo |= referenced(components[name]) - seen
    return seen


def test_every_response_schema_has_an_example_that_fits_it(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    names = response_components(schema)
    assert {"DeviceOut", "ErrorOut", "ListEnvelope_DeviceOut_", "DraHealthOut"} <= names
    assert len(names) >= 40
    for name in sorted(names):
        examples = components[name].get("examples")
        assert examples, f"{name} has no example"
        validator = jsonschema_rs.Draft202012Validator(
            {"$ref": f"#/components/schemas/{name}", "components": schema["components"]}
        )
        for example in examples:
            errors = [e.message for e in validator.iter_errors(example)]
            assert not errors, (name, errors)
