"""Input the database cannot hold, and snapshots that would grow a node without bound: each is a
422 naming the field and the rule, and nothing changes."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Annotated, Any, get_args, get_origin

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devicedeck.inventory.dra.health_reports import DraHealthSnapshot
from devicedeck.inventory.schemas import _Input, check_device_id, check_storable_text

from .conftest import GPU, Api, MakeApi, dev, held, listandwatch, pod, podresources
from .test_ingest_validation import LAW, PODRES, assert_refused, good_law, good_podres, setter

LONE_SURROGATE = "a\ud800"


def post_escaped(api: Api, path: str, body: Any) -> httpx.Response:
    # A lone surrogate cannot be encoded as UTF-8, so a client can only send it as a JSON
    # escape ("\ud800"), which is what json.dumps writes by default.
    content = json.dumps(body).encode("ascii")
    headers = {**api.headers, "content-type": "application/json"}
    return api.client.post(path, content=content, headers=headers)


SURROGATE_CASES: list[tuple[str, Callable[[], dict[str, Any]], str, str, str]] = [
    ("plugin device ID", good_law, "devices.1.ID", "devices[1].ID", "utf8"),
    ("plugin health", good_law, "devices.1.health", "devices[1].health", "utf8"),
    ("boot_id", good_law, "source.boot_id", "source.boot_id", "utf8"),
    (
        "held device ID",
        good_podres,
        "pod_resources.0.containers.0.devices.0.device_ids.1",
        "pod_resources[0].containers[0].devices[0].device_ids[1]",
        "device_id",
    ),
    ("pod uid", good_podres, "pod_resources.0.uid", "pod_resources[0].uid", "utf8"),
]


def test_lone_surrogate_in_a_snapshot_is_422_naming_the_field(
    api: Api, db_rows: Callable[..., dict]
) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    before = db_rows()
    for name, good, path, field, rule in SURROGATE_CASES:
        body = good()
        if path.startswith("pod_resources.0.uid"):
            body["pod_resources"][0]["uid"] = "x"
        setter(path, LONE_SURROGATE)(body)
        target = LAW if "devices" in body else PODRES
        response = post_escaped(api, target, body)
        assert_refused(response, field, rule)
        assert db_rows() == before, name


def test_lone_surrogate_in_the_allocatable_list_is_422(
    api: Api, db_rows: Callable[..., dict]
) -> None:
    before = db_rows()
    body = podresources("node-a", [], 1)
    body["allocatable"] = {
        "devices": [{"resource_name": GPU, "device_ids": ["ok", LONE_SURROGATE]}]
    }
    assert_refused(
        post_escaped(api, PODRES, body), "allocatable.devices[0].device_ids[1]", "device_id"
    )
    assert db_rows() == before


def test_lone_surrogate_in_a_token_name_is_422(api: Api, db_rows: Callable[..., dict]) -> None:
    before = db_rows()
    response = post_escaped(api, "/api/v1/tokens", {"name": LONE_SURROGATE, "scopes": ["read"]})
    assert_refused(response, "name", "utf8")
    assert db_rows() == before


def test_lone_surrogate_inside_a_cursor_is_422_naming_the_cursor(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev(f"gpu-{i}") for i in range(3)], 1))
    page = api.get("/api/v1/devices", limit=1)
    cursor = page["next"].split("cursor=")[1].split("&")[0]
    padded = cursor + "=" * (-len(cursor) % 4)
    data = json.loads(base64.urlsafe_b64decode(padded))
    data["v"] = [LONE_SURROGATE if isinstance(v, str) else v for v in data["v"]]
    forged = base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")
    response = api.client.get(
        "/api/v1/devices", params={"limit": 1, "cursor": forged}, headers=api.headers
    )
    assert_refused(response, "cursor", "cursor")


# Hypothesis: any string field of a valid snapshot, given text with lone surrogates (and
# other unusual code points), is answered with a 4xx at worst, never a 5xx.
SNAPSHOT_TEXT_FIELDS = [
    (good_law, "node"),
    (good_law, "resource"),
    (good_law, "devices.0.ID"),
    (good_law, "devices.0.health"),
    (good_law, "source.boot_id"),
    (good_podres, "pod_resources.0.name"),
    (good_podres, "pod_resources.0.namespace"),
    (good_podres, "pod_resources.0.containers.0.name"),
    (good_podres, "pod_resources.0.containers.0.devices.0.resource_name"),
    (good_podres, "pod_resources.0.containers.0.devices.0.device_ids.0"),
]
UNUSUAL_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(categories=["Cs"]),
        st.characters(categories=["Cc", "Zs", "Lu", "Ll", "Nd", "So"]),
    ),
    min_size=1,
    max_size=12,
)


@given(field=st.sampled_from(SNAPSHOT_TEXT_FIELDS), text=UNUSUAL_TEXT)
@settings(
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_unusual_text_in_any_snapshot_field_is_never_a_server_error(
    api: Api, field: tuple[Callable[[], dict[str, Any]], str], text: str
) -> None:
    good, path = field
    body = good()
    setter(path, text)(body)
    target = LAW if "devices" in body else PODRES
    response = post_escaped(api, target, body)
    assert response.status_code < 500, response.text


def test_allocatable_ids_count_against_the_snapshot_limit(
    make_api: MakeApi, db_rows: Callable[..., dict]
) -> None:
    small = make_api(max_devices_per_snapshot=3)
    before = db_rows()
    body = podresources("node-a", [], 1)
    body["allocatable"] = {"devices": [{"resource_name": GPU, "device_ids": ["a", "b", "c", "d"]}]}
    assert_refused(small.post(PODRES, body, expect=None), "allocatable", "too_long")
    assert db_rows() == before
    body["allocatable"]["devices"][0]["device_ids"] = ["a", "b", "c"]
    small.ingest_podresources(body)


def test_a_node_cannot_have_more_devices_than_the_per_node_limit(
    make_api: MakeApi, db_rows: Callable[..., dict]
) -> None:
    small = make_api(max_devices_per_node=4)
    small.ingest_listandwatch(listandwatch("node-a", [dev("g0"), dev("g1"), dev("g2")], 1))
    before = db_rows()
    # Another resource's plugin would bring the node to 5 devices.
    other = listandwatch("node-a", [dev("d0"), dev("d1")], 1)
    other["resource"] = "example.com/dongle"
    assert_refused(small.post(LAW, other, expect=None), "devices", "max_devices_per_node")
    # PodResources naming devices no plugin has described would too.
    held_unknown = podresources("node-a", [pod("p", containers={"c": [held(GPU, "x0", "x1")]})], 1)
    assert_refused(
        small.post(PODRES, held_unknown, expect=None), "pod_resources", "max_devices_per_node"
    )
    assert db_rows() == before
    # Replacing a resource's list counts only what it leaves: 4 GPUs is at the limit.
    small.ingest_listandwatch(
        listandwatch("node-a", [dev("g0"), dev("g1"), dev("g5"), dev("g6")], 2)
    )
    # Health changes and re-listing known devices are never refused.
    small.ingest_listandwatch(
        listandwatch("node-a", [dev("g0", "Unhealthy"), dev("g1"), dev("g5"), dev("g6")], 3)
    )


def test_one_device_held_by_two_pods_in_one_snapshot_is_422(
    api: Api, db_rows: Callable[..., dict]
) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    before = db_rows()
    body = podresources(
        "node-a",
        [
            pod("p0", containers={"main": [held(GPU, "gpu-0")]}),
            pod("p1", containers={"main": [held(GPU, "gpu-1", "gpu-0")]}),
        ],
        1,
    )
    response = api.post(PODRES, body, expect=None)
    assert_refused(response, "pod_resources", "allocated_once")
    message = response.json()["error"]["details"][0]["message"]
    assert "pod_resources[1].containers[0].devices[0].device_ids[1]" in message
    assert "p0" in message
    assert db_rows() == before
    # The same device listed twice for one container (once per NUMA node) is fine.
    numa_repeat = podresources(
        "node-a", [pod("p0", containers={"main": [held(GPU, "gpu-0"), held(GPU, "gpu-0")]})], 1
    )
    api.ingest_podresources(numa_repeat)


def _subclasses(model: type[_Input]) -> list[type[_Input]]:
    found = []
    for sub in model.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _text_types(annotation: Any) -> list[Any]:
    """The str types inside a field's annotation: itself, a union's members, a list's items."""
    if annotation is str or get_origin(annotation) is Annotated:
        return [annotation]
    return [t for arg in get_args(annotation) for t in _text_types(arg)]


def test_every_text_field_of_every_snapshot_part_refuses_what_the_database_cannot_hold() -> None:
    # The check sits in each field's type, so a new str field must bring it along: without it,
    # a NUL in that field would fail mid-transaction as a server error.
    assert DraHealthSnapshot in _subclasses(_Input)
    unchecked = []
    for model in _subclasses(_Input):
        for name, field in model.model_fields.items():
            checks = [*field.metadata]
            types = _text_types(field.annotation)
            for text in types:
                if get_origin(text) is Annotated:
                    base, *checks = get_args(text) + tuple(field.metadata)
                    if base is not str:
                        continue
                if not any(
                    getattr(c, "func", None) in (check_storable_text, check_device_id)
                    for c in checks
                ):
                    unchecked.append(f"{model.__name__}.{name}")
    assert unchecked == []
