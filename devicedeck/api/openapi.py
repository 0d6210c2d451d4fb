"""The OpenAPI document: FastAPI's own, plus the security each operation enforces, and the
response models' examples as they were written.

The security of an operation is read from the scope check its route depends on, so the
document cannot call a route open when it is not, or the other way round.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel

from devicedeck.web.principal import SESSION_COOKIE, ScopeCheck

BEARER = "bearerToken"
COOKIE = "sessionCookie"

SECURITY_SCHEMES = {
    BEARER: {
        "type": "http",
        "scheme": "bearer",
        "description": "An API token (`ddk_…`; scopes read, ingest and admin), or, with "
        "cluster access on, a node agent's ServiceAccount token (ingest for its own node). "
        "Each operation names the scope it needs; admin holds every scope.",
    },
    COOKIE: {
        "type": "apiKey",
        "in": "cookie",
        "name": SESSION_COOKIE,
        "description": "The dashboard's session id (never a token), set by signing in at /login "
        "with a token; it ends at sign-out, when the token is revoked, or when it expires.",
    },
}


def required_scopes(dependant: Dependant) -> list[str]:
    found: list[str] = []
    for dependency in dependant.dependencies:
        if isinstance(dependency.call, ScopeCheck):
            found.append(dependency.call.scope)
        found.extend(required_scopes(dependency))
    return sorted(set(found))


def add_security(
    schema: dict[str, Any], routers: list[APIRouter], open_scopes: frozenset[str]
) -> None:
    schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
    scopes_by_operation = {
        route.operation_id: required_scopes(route.dependant)
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute)
    }
    for item in schema["paths"].values():
        for operation in item.values():
            scopes = scopes_by_operation.get(operation.get("operationId"))
            if scopes:
                # OpenAPI 3.1 lets a bearer or API-key requirement list roles: the scope.
                operation["security"] = [{BEARER: scopes}, {COOKIE: scopes}]
                if set(scopes) <= open_scopes:
                    operation["security"].append({})  # no credentials at all will do


def response_models(routers: list[APIRouter]) -> Iterator[type[BaseModel]]:
    for router in routers:
        for route in router.routes:
            if not isinstance(route, APIRoute):
                continue
            models = [route.response_model, *(r.get("model") for r in route.responses.values())]
            yield from (m for m in models if isinstance(m, type) and issubclass(m, BaseModel))


def restore_examples(schema: dict[str, Any], routers: list[APIRouter]) -> None:
    """FastAPI writes the document without null values, and so takes every null out of the
    examples too, leaving examples that break their own schema: put them back whole, from the
    models' own schemas (matched by title)."""
    by_title: dict[str, Any] = {}
    for model in response_models(routers):
        own = model.model_json_schema(mode="serialization")
        for component in (own, *own.get("$defs", {}).values()):
            if "examples" in component:
                by_title[component["title"]] = component["examples"]
    for component in schema.get("components", {}).get("schemas", {}).values():
        if component.get("title") in by_title and "examples" in component:
            component["examples"] = by_title[component["title"]]


def install(app: FastAPI, routers: list[APIRouter], open_scopes: frozenset[str]) -> None:
    """Adds the security of the operations of `routers` (each with its own operation_id);
    `open_scopes`: what a caller without credentials may do (auth off: read)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = app.openapi_schema
        if schema is None:
            schema = generate()  # which FastAPI keeps as app.openapi_schema
            add_security(schema, routers, open_scopes)
            restore_examples(schema, routers)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
