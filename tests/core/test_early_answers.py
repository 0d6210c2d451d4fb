"""A repeated snapshot is answered before FastAPI handles the request (`EarlyAnswers`): its
answer, its caller's checks, and what the service counts and logs of it must be those of the
route."""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import Api, dev, listandwatch

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)

DEVICES = [dev("gpu-0"), dev("gpu-1")]
LAW = "/api/v1/ingest/listandwatch"


def answer(response: httpx.Response) -> tuple[int, list[tuple[str, str]], bytes]:
    return response.status_code, sorted(response.headers.multi_items()), response.content


def test_an_early_answer_is_the_routes_answer_byte_for_byte(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    early = api.post(LAW, listandwatch("node-a", DEVICES, 2))
    # The same content in another key order is no repeat of the body: the route answers it.
    reordered = dict(reversed(list(listandwatch("node-a", DEVICES, 3).items())))
    routed = api.post(LAW, reordered)
    assert early.json()["changed"] is False
    assert answer(early) == answer(routed)


def test_a_repeat_from_a_caller_the_route_refuses_is_refused_as_by_the_route(
    api: Api, make_token: Callable[..., str]
) -> None:
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    repeat = listandwatch("node-a", DEVICES, 2)
    callers = {
        "read only": ({"Authorization": f"Bearer {make_token('read')}"}, 403),
        "unknown token": ({"Authorization": "Bearer ddk_no-such-token"}, 401),
        "no token": ({}, 401),
        "malformed header": ({"Authorization": "Basic x"}, 401),
    }
    for name, (headers, status) in callers.items():
        refused = api.client.post(LAW, json=repeat, headers=headers)
        assert refused.status_code == status, (name, refused.text)
        assert refused.json()["error"]["code"] in {"forbidden", "unauthorized"}, name
    # Nothing was recorded: seq 2 is still new.
    assert api.ingest_listandwatch(repeat)["duplicate"] is False


def test_an_early_answer_is_counted_timed_and_logged_by_its_route(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    caplog.set_level(logging.INFO, logger="app.access")
    for seq in (2, 3, 4):
        assert api.ingest_listandwatch(listandwatch("node-a", DEVICES, seq))["changed"] is False
    logged = [(r.route, r.status, r.principal) for r in caplog.records if r.name == "app.access"]
    assert logged == [(LAW, 200, "tester")] * 3

    scraped = api.client.get("/metrics").text
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
    }
    route = (("method", "POST"), ("route", LAW))
    assert samples[("devicedeck_http_requests_total", (*route, ("status", "200")))] == 4
    assert samples[("devicedeck_http_request_duration_seconds_count", route)] == 4
