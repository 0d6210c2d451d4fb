"""Devices: filter values in any letter case, node name prefixes, and the sorts an operator
reaches for (unhealthy first, by holder, by when health last changed), across pages."""

from __future__ import annotations

from .conftest import GPU, Api, dev, held, listandwatch, pod, podresources


def fleet(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("gpu-a", [dev("a0"), dev("a1", "Unhealthy")], 1))
    api.ingest_listandwatch(listandwatch("gpu-b", [dev("b0"), dev("b1")], 1))
    api.ingest_listandwatch(listandwatch("cpu-c", [dev("c0", "Unhealthy"), dev("c1")], 1))
    api.ingest_listandwatch(listandwatch("gpu-b", [dev("b0", "Unhealthy"), dev("b1")], 2))
    api.ingest_podresources(
        podresources("gpu-b", [pod("zeta", containers={"m": [held(GPU, "b1")]})], 1)
    )
    api.ingest_podresources(
        podresources("gpu-a", [pod("alpha", containers={"m": [held(GPU, "a0")]})], 1)
    )


def ids(devices: list[dict]) -> list[str]:
    return [d["device_id"] for d in devices]


def test_filter_values_in_any_case_and_node_prefix(api: Api) -> None:
    fleet(api)
    assert sorted(ids(api.devices(health="unhealthy"))) == ["a1", "b0", "c0"]
    assert ids(api.devices(health="UNHEALTHY", node="gpu-a")) == ["a1"]
    assert len(api.devices(state="ANY")) == 6
    assert sorted(ids(api.devices(node_prefix="gpu-"))) == ["a0", "a1", "b0", "b1"]
    assert api.devices(node_prefix="%") == []  # a prefix, not a pattern


def test_sorts_unhealthy_first_by_holder_and_by_health_since(api: Api) -> None:
    fleet(api)
    attention = api.all_pages("/api/v1/devices", sort="attention", limit=2)
    assert [d["health"] for d in attention][:3] == ["Unhealthy"] * 3
    assert ids(attention)[:3] == ["c0", "a1", "b0"]  # then by node name
    holders = api.all_pages("/api/v1/devices", sort="-holder", limit=2)
    assert [(d["allocation"] or {}).get("pod") for d in holders][:2] == ["zeta", "alpha"]
    since = api.all_pages("/api/v1/devices", sort="-health_since", limit=1)
    assert ids(since)[0] == "b0"  # the last to change health
    assert sorted(ids(since)) == ["a0", "a1", "b0", "b1", "c0", "c1"]
