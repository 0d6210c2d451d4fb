"""A valid snapshot is answered before FastAPI handles the request (`EarlyAnswers`), a repeat
without validating it again: its answer, its caller's checks, and what the service counts and
logs of it must be those of the route."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicedeck.inventory.schemas import repeat_digest
from devicedeck.inventory.write.receipts import listandwatch_stream
from devicedeck.web.state import service_state

from .conftest import GPU, Api, dev, held, listandwatch, pod, podresources

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)

DEVICES = [dev("gpu-0"), dev("gpu-1")]
LAW = "/api/v1/ingest/listandwatch"
POD_RESOURCES = "/api/v1/ingest/podresources"


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
    caplog.set_level(logging.INFO, logger="devicedeck.access")
    for seq in (2, 3, 4):
        assert api.ingest_listandwatch(listandwatch("node-a", DEVICES, seq))["changed"] is False
    logged = [
        (r.route, r.status, r.principal) for r in caplog.records if r.name == "devicedeck.access"
    ]
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


def routed(api: Api, path: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    """`body` as the route answers it: a media type with a charset is for FastAPI to read."""
    return api.client.post(
        path,
        content=json.dumps(body),
        headers={
            **(api.headers if headers is None else headers),
            "Content-Type": "application/json; charset=utf-8",
        },
    )


def test_a_new_nodes_snapshots_are_answered_as_by_the_route(api: Api) -> None:
    for node, post in (("node-e", api.post), ("node-r", lambda p, b: routed(api, p, b))):
        law = post(LAW, listandwatch(node, DEVICES, 1))
        held_gpu = [pod("p", containers={"c": [held(GPU, "gpu-0"), held(GPU, "gpu-9")]})]
        pods = post(POD_RESOURCES, podresources(node, held_gpu, 2))
        if node == "node-e":
            early = (answer(law), answer(pods))
        else:
            assert (answer(law), answer(pods)) == early
    assert early[0][0] == early[1][0] == 200
    for node in ("node-e", "node-r"):
        assert api.device(node, "gpu-9")["allocation"]["pod"] == "p"


def test_a_snapshot_the_domain_refuses_is_refused_as_by_the_route(
    api: Api, make_token: Callable[..., str]
) -> None:
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 5))
    older = listandwatch("node-a", [dev("gpu-7")], 4)
    stale = api.post(LAW, older, expect=409)
    assert answer(stale) == answer(routed(api, LAW, older))
    other = {"Authorization": f"Bearer {make_token('ingest', node='node-b')}"}
    new = listandwatch("node-a", [dev("gpu-7")], 6)
    forged = api.client.post(LAW, json=new, headers=other)
    assert forged.json()["error"]["code"] == "node_mismatch"
    assert answer(forged) == answer(routed(api, LAW, new, other))
    assert api.ingest_listandwatch(new)["added"] == 1


def test_a_new_streams_repeats_are_soon_answered_early(api: Api) -> None:
    """A stream this process has not stored is not looked at for a repeat, but its first
    snapshot leaves the body known: the next one, repeating it, is answered early."""
    recent = service_state(api.client.app).ingest.recent
    stream = listandwatch_stream(GPU)
    bodies = [listandwatch("node-n", DEVICES, seq) for seq in (1, 2, 3)]

    def known(body: dict[str, Any]) -> bool:
        digest = repeat_digest(body)
        return digest is not None and recent.content_of("node-n", stream, digest) is not None

    assert not known(bodies[0])
    api.ingest_listandwatch(bodies[0])
    assert known(bodies[1])
    assert api.ingest_listandwatch(bodies[1])["changed"] is False
    assert known(bodies[2])
    assert api.ingest_listandwatch(bodies[2])["changed"] is False
