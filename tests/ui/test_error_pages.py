"""A dashboard page that fails answers the dashboard's HTML error page, whatever failed and
wherever the page lives; the JSON API keeps answering JSON."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from core.test_service import unreachable
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from devicedeck.config import Settings
from devicedeck.main import create_app

from .dom import parse

# Any token: checking it needs the database, so the page fails for want of it.
SOME_TOKEN = {"Authorization": "Bearer ddk_whatever"}
PARAMETER = re.compile(r"\{[^}]+\}")


def _routes(routes: list[Any]) -> Iterator[Any]:
    for route in routes:
        included = getattr(route, "original_router", None)
        yield from _routes(included.routes) if included is not None else [route]


def page_paths(app: Any) -> list[str]:
    """A path for every page the dashboard serves with GET, its parameters filled in."""
    paths = []
    for route in _routes(app.routes):
        if not isinstance(route, APIRoute) or "GET" not in route.methods:
            continue
        module = route.endpoint.__module__
        if module.startswith("devicedeck.ui.routes.") and not module.endswith(".missing"):
            paths.append(PARAMETER.sub("x", route.path))
    return sorted(paths)


def html_error(response: Any, status: int, heading: str) -> None:
    assert response.status_code == status, (response.request.url, response.text[:500])
    assert response.headers["content-type"].startswith("text/html"), response.request.url
    assert parse(response.text).one("h1").clean_text == heading, response.request.url


@pytest.fixture
def unreachable_app(settings: Settings, database_url: str, tmp_path: Any) -> Iterator[TestClient]:
    broken = settings.model_copy(update={"database_url": unreachable(database_url, tmp_path)})
    app = create_app(broken)
    app.state.background_starters.clear()
    with TestClient(app) as client:
        yield client


def test_every_page_answers_a_database_outage_with_the_error_page(
    unreachable_app: TestClient,
) -> None:
    paths = page_paths(unreachable_app.app)
    assert {"/", "/dra", "/dra/devices/x/x/x", "/nodes/x", "/pods/x/x"} <= set(paths)
    for path in paths:
        response = unreachable_app.get(path, headers=SOME_TOKEN)
        if path == "/login":  # asks nothing of the database
            assert response.status_code == 200
            continue
        html_error(response, 503, "Unavailable")
    api = unreachable_app.get("/api/v1/dra/devices", headers=SOME_TOKEN)
    assert api.status_code == 503 and api.json()["error"]["code"] == "unavailable"


def test_a_page_that_fails_midway_answers_the_error_page(
    client: TestClient, auth: dict[str, str], engine: Engine
) -> None:
    """A table the DRA device page reads last is gone: on PostgreSQL an error of no known
    kind (500), on SQLite an operational one (503). Either way a page, not JSON."""
    quiet = TestClient(client.app, raise_server_exceptions=False)
    postgresql = engine.dialect.name == "postgresql"
    status, heading = (500, "Internal error") if postgresql else (503, "Unavailable")
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE dra_health_reports RENAME TO dra_health_reports_gone"))
    try:
        page = quiet.get("/dra/devices/gpu.example.com/node-a/gpu-0", headers=auth)
        html_error(page, status, heading)
        if postgresql:
            assert "Nothing was changed" in parse(page.text).one("main").clean_text
        api = quiet.get(
            "/api/v1/dra/drivers/gpu.example.com/pools/node-a/devices/gpu-0", headers=auth
        )
        assert api.status_code == status and "error" in api.json()
    finally:
        with engine.begin() as connection:
            connection.execute(
                text("ALTER TABLE dra_health_reports_gone RENAME TO dra_health_reports")
            )
