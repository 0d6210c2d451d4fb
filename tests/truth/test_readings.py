"""The oracle's reading of the service: a pod that held a device and finished is no holder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from ui.servers import threaded_server

from devicedeck.config import AuthMode, Settings
from devicedeck.truth.model import DeviceKey
from devicedeck.truth.readings import read_api

GPU = "nvidia.com/gpu"
BOOT = "boot-1"
OBSERVED_AT = "2026-12-05T08:00:00Z"


def _devices(seq: int) -> dict[str, Any]:
    return {
        "node": "gpu-a",
        "resource": GPU,
        "source": {"boot_id": BOOT, "seq": seq},
        "observed_at": OBSERVED_AT,
        "devices": [{"ID": "GPU-0", "health": "Healthy"}, {"ID": "GPU-1", "health": "Healthy"}],
    }


def _pods(seq: int, holders: dict[str, str]) -> dict[str, Any]:
    """A PodResources snapshot: pod name -> the GPU its one container holds."""
    return {
        "node": "gpu-a",
        "source": {"boot_id": BOOT, "seq": seq},
        "observed_at": OBSERVED_AT,
        "pod_resources": [
            {
                "name": name,
                "namespace": "truth",
                "containers": [
                    {
                        "name": "main",
                        "devices": [{"resource_name": GPU, "device_ids": [device_id]}],
                    }
                ],
            }
            for name, device_id in sorted(holders.items())
        ],
    }


def test_a_finished_pod_holds_nothing_in_the_services_answer(
    database_url: str, make_token: Callable[..., str]
) -> None:
    settings = Settings(database_url=database_url, auth=AuthMode.OFF, stale_after=90)
    headers = {"Authorization": f"Bearer {make_token('ingest')}"}
    with threaded_server(settings) as (url, _):

        def post(path: str, body: dict[str, Any]) -> None:
            response = httpx.post(f"{url}/api/v1/ingest/{path}", json=body, headers=headers)
            assert response.status_code == 200, response.text

        post("listandwatch", _devices(1))
        post("podresources", _pods(1, {"p-1": "GPU-0", "p-2": "GPU-1"}))
        # p-1 ends; p-3 takes its GPU.
        post("podresources", _pods(2, {"p-2": "GPU-1", "p-3": "GPU-0"}))
        # The service still lists p-1, as finished, with the hold it ended.
        finished = httpx.get(f"{url}/api/v1/pods/truth/p-1").json()
        assert finished["running"] is False

        view = read_api(url)

    assert view.holders == {
        DeviceKey("gpu-a", GPU, "GPU-0"): frozenset({"truth/p-3"}),
        DeviceKey("gpu-a", GPU, "GPU-1"): frozenset({"truth/p-2"}),
    }
