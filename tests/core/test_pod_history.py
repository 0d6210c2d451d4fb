"""GET /api/v1/pods/NS/NAME for running and finished pods: "did my job run on a bad GPU?"."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from .conftest import GPU, NIC, Api, dev, held, listandwatch, pod, podresources


def states(hold: dict) -> list[str]:
    return [span["health"] for span in hold["health_during"]]


def holds_by_id(answer: dict) -> dict[str, dict]:
    return {d["device_id"]: d for c in answer["containers"] for d in c["devices"]}


def test_finished_pod_shows_each_device_and_its_health_while_held(api: Api) -> None:
    gpus = [dev("gpu-0"), dev("gpu-1"), dev("gpu-2", "Unhealthy"), dev("gpu-3")]
    api.ingest_listandwatch(listandwatch("node-a", gpus, 1))
    api.ingest_listandwatch(listandwatch("node-a", [dev("nic-0")], 1, resource=NIC))
    job = pod(
        "train",
        containers={"main": [held(GPU, "gpu-0", "gpu-2")], "side": [held(NIC, "nic-0")]},
        uid="uid-train",
    )
    api.ingest_podresources(podresources("node-a", [job], 1))
    running = api.get("/api/v1/pods/ml/train")
    assert running["running"] is True and running["ended"] is None
    assert running["uid"] == "uid-train" and running["node"] == "node-a"

    # gpu-0 fails and recovers while held; gpu-3, which the pod does not hold, fails too.
    sick = [dev("gpu-0", "Unhealthy"), dev("gpu-1"), dev("gpu-2", "Unhealthy"), dev("gpu-3")]
    api.ingest_listandwatch(listandwatch("node-a", sick, 2))
    api.ingest_listandwatch(listandwatch("node-a", gpus, 3))
    api.ingest_podresources(podresources("node-a", [], 2))
    # After the pod ends, its devices' health no longer counts against it.
    later = [dev("gpu-0"), dev("gpu-1"), dev("gpu-2"), dev("gpu-3", "Unhealthy")]
    api.ingest_listandwatch(listandwatch("node-a", later, 4))

    finished = api.get("/api/v1/pods/ml/train")
    assert finished["running"] is False and finished["ended"] is not None
    assert finished["unhealthy_while_held"] is True
    assert [c["name"] for c in finished["containers"]] == ["main", "side"]
    holds = holds_by_id(finished)
    assert sorted(holds) == ["gpu-0", "gpu-2", "nic-0"]
    assert states(holds["gpu-0"]) == ["Healthy", "Unhealthy", "Healthy"]
    assert holds["gpu-0"]["unhealthy_while_held"] is True
    # gpu-2 was already unhealthy when the pod got it, and stayed so.
    assert states(holds["gpu-2"]) == ["Unhealthy"]
    assert states(holds["nic-0"]) == ["Healthy"] and not holds["nic-0"]["unhealthy_while_held"]
    for hold in holds.values():
        spans = hold["health_during"]
        assert spans[0]["since"] == hold["started"] and spans[-1]["until"] == hold["ended"]
        assert all(a["until"] == b["since"] for a, b in pairwise(spans))
    # Health now, beside health then.
    assert holds["gpu-2"]["health"] == "Healthy"


def test_healthy_job_and_removed_device(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    job = pod("infer", namespace="serving", containers={"c": [held(GPU, "gpu-0", "gpu-1")]})
    api.ingest_podresources(podresources("node-a", [job], 1))
    api.ingest_podresources(podresources("node-a", [], 2))
    healthy = api.get("/api/v1/pods/serving/infer")
    assert healthy["unhealthy_while_held"] is False
    assert all(states(h) == ["Healthy"] for h in holds_by_id(healthy).values())

    api.ingest_podresources(podresources("node-a", [job], 3))
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 2))
    again = api.get("/api/v1/pods/serving/infer")
    assert again["running"] is True
    # Two holds of each device now, newest first; gpu-1 left the plugin's list while held.
    gpu_1 = [d for c in again["containers"] for d in c["devices"] if d["device_id"] == "gpu-1"]
    assert [h["ended"] is None for h in gpu_1] == [True, False]
    assert states(gpu_1[0]) == ["Healthy", "Removed"]
    assert again["unhealthy_while_held"] is False


def test_unknown_pod_is_404_in_the_error_shape(api: Api) -> None:
    response = api.client.get("/api/v1/pods/ml/never", headers=api.headers)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_the_pods_list_finds_finished_pods_newest_first_and_by_state(api: Api) -> None:
    """The question "did my job run on a bad GPU?" comes after the job ended: the list has it."""
    api.ingest_listandwatch(listandwatch("node-f", [dev("g0"), dev("g1")], 1))
    first = pod("early", containers={"main": [held(GPU, "g0")]})
    second = pod("later", containers={"main": [held(GPU, "g1")]})
    api.ingest_podresources(podresources("node-f", [first], 1))
    api.ingest_podresources(podresources("node-f", [first, second], 2))
    api.ingest_podresources(podresources("node-f", [second], 3))

    def listed(**params: Any) -> list[tuple[str, bool]]:
        results = api.get("/api/v1/pods", node="node-f", **params)["results"]
        return [(p["name"], p["running"]) for p in results]

    assert listed() == [("later", True), ("early", False)]
    assert listed(state="any") == listed()
    assert listed(state="running") == [("later", True)]
    assert listed(state="Finished") == [("early", False)]
    (early,) = api.get("/api/v1/pods", node="node-f", state="finished")["results"]
    assert early["ended"] is not None and early["ended"] >= early["started"]
    (container,) = early["containers"]
    assert [(d["device_id"], d["ended"]) for d in container["devices"]] == [("g0", early["ended"])]
    refused = api.get("/api/v1/pods", expect=422, state="gone")["error"]
    assert [(d["field"], d["rule"]) for d in refused["details"]] == [("state", "enum")]
