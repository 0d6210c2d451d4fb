"""What the truth oracle reads from a real service: the holders it compares with the kubelet are
the running pods' current holds, not the holds of pods that finished."""

from __future__ import annotations

from devicedeck.config import AuthMode, Settings
from devicedeck.main import create_app
from devicedeck.truth.model import DeviceKey
from devicedeck.truth.readings import read_api

from .conftest import GPU, Api, dev, held, listandwatch, live_server, pod, podresources


def test_the_oracle_counts_only_current_holds_as_holders(api: Api, database_url: str) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    first = [pod("first", containers={"main": [held(GPU, "gpu-0")]})]
    api.ingest_podresources(podresources("node-a", first, 1))
    # "first" ends; "second" takes gpu-1. The pods list keeps "first" as a finished pod.
    second = [pod("second", containers={"main": [held(GPU, "gpu-1")]})]
    api.ingest_podresources(podresources("node-a", second, 2))
    assert {p["name"] for p in api.get("/api/v1/pods")["results"]} == {"first", "second"}

    reader = Settings(database_url=database_url, auth=AuthMode.OFF, stale_after=90)
    with live_server(create_app(reader)) as url:
        view = read_api(url)
    assert view.holders == {DeviceKey("node-a", GPU, "gpu-1"): frozenset({"ml/second"})}
    assert set(view.devices) == {
        DeviceKey("node-a", GPU, "gpu-0"),
        DeviceKey("node-a", GPU, "gpu-1"),
    }
