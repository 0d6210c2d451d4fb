"""What a real cluster does around the objects, done by the simulated API server: namespaces
(made by use, Terminating before they go), events that expire, dry runs that store nothing,
the node controllers' taints and heartbeat check, and the access reviews."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

from sim.helpers import wait_until

from devicedeck.sim.apiserver import SimApiServer
from devicedeck.sim.apiserver.node_lifecycle import NodeLifecycle
from devicedeck.sim.apiserver.protobuf_bodies import MAGIC, PROTOBUF
from devicedeck.sim.apiserver.resources import EVENTS

from .conftest import http, node_object, pod_object

TAINT = "node.kubernetes.io/unschedulable"


def names(api: SimApiServer, path: str) -> list[str]:
    return [i["metadata"]["name"] for i in http(api, "GET", path)[1]["items"]]


def test_a_namespace_in_use_exists_and_a_deleted_one_terminates_first(api: SimApiServer) -> None:
    assert http(api, "POST", "/api/v1/namespaces/ml/pods", pod_object("ml", "train"))[0] == 201
    namespace = http(api, "GET", "/api/v1/namespaces/ml")[1]
    assert namespace["status"] == {"phase": "Active"}
    assert namespace["metadata"]["labels"] == {"kubernetes.io/metadata.name": "ml"}

    code, deleted = http(api, "DELETE", "/api/v1/namespaces/ml")
    assert code == 200 and deleted["status"]["phase"] == "Terminating"
    code, refused = http(api, "POST", "/api/v1/namespaces/ml/pods", pod_object("ml", "later"))
    assert code == 403 and "being terminated" in refused["message"]
    wait_until(
        lambda: http(api, "GET", "/api/v1/namespaces/ml")[0] == 404,
        timeout=120,
        message="the terminating namespace to go",
    )
    assert names(api, "/api/v1/pods") == []


def test_the_system_namespaces_cannot_be_deleted(api: SimApiServer) -> None:
    code, status = http(api, "DELETE", "/api/v1/namespaces/kube-system")
    assert (code, status["reason"]) == (403, "Forbidden")
    assert "kube-system" in names(api, "/api/v1/namespaces")


def test_a_dry_run_answers_the_result_and_stores_nothing(api: SimApiServer) -> None:
    before = json.dumps(api.store.objects, sort_keys=True)
    code, answer = http(api, "POST", "/api/v1/nodes?dryRun=All", node_object("gpu-a"))
    assert code == 201 and answer["metadata"]["uid"]
    code, answer = http(
        api, "POST", "/api/v1/namespaces/fresh/pods?dryRun=All", pod_object("fresh", "p")
    )
    assert code == 201 and answer["status"] == {"phase": "Pending"}
    assert json.dumps(api.store.objects, sort_keys=True) == before

    http(api, "POST", "/api/v1/nodes", node_object("gpu-a"))
    stored = http(api, "GET", "/api/v1/nodes/gpu-a")[1]
    cordon = {"spec": {"unschedulable": True}}
    code, answer = http(
        api, "PATCH", "/api/v1/nodes/gpu-a?dryRun=All", cordon, "application/merge-patch+json"
    )
    assert code == 200 and answer["spec"]["taints"][0]["key"] == TAINT
    assert http(api, "DELETE", "/api/v1/nodes/gpu-a?dryRun=All")[0] == 200
    assert http(api, "GET", "/api/v1/nodes/gpu-a")[1] == stored


def test_a_dry_run_value_other_than_all_is_refused(api: SimApiServer) -> None:
    code, status = http(api, "POST", "/api/v1/nodes?dryRun=Some", node_object("gpu-a"))
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "dryRun"
    assert http(api, "GET", "/api/v1/nodes/gpu-a")[0] == 404


def test_an_unknown_field_by_default_is_stored_with_a_warning(api: SimApiServer) -> None:
    body = json.dumps({"metadata": {"name": "settings"}, "date": {"a": "b"}}).encode()
    request = urllib.request.Request(
        api.url + "/api/v1/namespaces/ml/configmaps",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        assert response.headers.get_all("Warning") == ['299 - "unknown field \\"date\\""']


def test_events_expire(api: SimApiServer) -> None:
    path = "/api/v1/namespaces/default/events"
    event = {"metadata": {"name": "gpu-a.1"}, "involvedObject": {"kind": "Node", "name": "a"}}
    assert http(api, "POST", path, event)[0] == 201
    assert names(api, path) == ["gpu-a.1"]
    # An hour on: the deadline the store keeps for the event has passed.
    with api.store.cond:
        for key in api.store.expiry:
            api.store.expiry[key] = time.monotonic() - 1
    assert names(api, path) == []
    assert api.store.history[-1].type == "DELETED"
    assert api.store.history[-1].plural == EVENTS.plural


def test_node_taints_follow_cordon_and_conditions(api: SimApiServer) -> None:
    node = node_object("gpu-a")
    node["spec"] = {"taints": [{"key": "example.com/maintenance", "effect": "NoExecute"}]}
    http(api, "POST", "/api/v1/nodes", node)
    merge = "application/merge-patch+json"

    def taints() -> list[str]:
        spec = http(api, "GET", "/api/v1/nodes/gpu-a")[1]["spec"]
        return [t["key"] for t in spec.get("taints", [])]

    http(api, "PATCH", "/api/v1/nodes/gpu-a", {"spec": {"unschedulable": True}}, merge)
    assert taints() == ["example.com/maintenance", TAINT]
    pressure = {"status": {"conditions": [{"type": "DiskPressure", "status": "True"}]}}
    http(
        api,
        "PATCH",
        "/api/v1/nodes/gpu-a/status",
        pressure,
        "application/strategic-merge-patch+json",
    )
    assert taints() == ["example.com/maintenance", TAINT, "node.kubernetes.io/disk-pressure"]
    http(api, "PATCH", "/api/v1/nodes/gpu-a", {"spec": {"unschedulable": False}}, merge)
    assert taints() == ["example.com/maintenance", "node.kubernetes.io/disk-pressure"]


def lease(name: str, renewed: datetime) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }


def test_a_node_whose_lease_ran_out_turns_unknown_and_unreachable(api: SimApiServer) -> None:
    now = datetime.now(UTC)
    leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    for name in ("gpu-a", "gpu-b", "gpu-c"):
        http(api, "POST", "/api/v1/nodes", node_object(name))
    http(api, "POST", leases, lease("gpu-a", now - timedelta(seconds=60)))
    http(api, "POST", leases, lease("gpu-b", now - timedelta(seconds=10)))
    # gpu-c has no lease: nothing tells whether its kubelet is alive.

    assert NodeLifecycle(api.store, grace_seconds=50).check(now) == ["gpu-a"]
    node = http(api, "GET", "/api/v1/nodes/gpu-a")[1]
    ready = node["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    assert node["spec"]["taints"] == [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
    ]
    for name in ("gpu-b", "gpu-c"):
        conditions = http(api, "GET", f"/api/v1/nodes/{name}")[1]["status"]["conditions"]
        assert conditions[0]["status"] == "True"
    # Marked once: a second look changes nothing.
    assert NodeLifecycle(api.store, grace_seconds=50).check(now) == []


def field(number: int, data: bytes) -> bytes:
    """A short length-delimited protobuf field."""
    return bytes([number << 3 | 2, len(data)]) + data


def protobuf_review(kind: str, api_version: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version.encode()) + field(2, kind.encode())
    return MAGIC + field(1, type_meta) + field(2, raw)


def test_access_reviews_sent_as_protobuf_are_answered(api: SimApiServer) -> None:
    attributes = field(1, b"ml") + field(2, b"get") + field(5, b"pods")
    body = protobuf_review(
        "SelfSubjectAccessReview", "authorization.k8s.io/v1", field(2, field(1, attributes))
    )
    code, answer = http(
        api, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body, PROTOBUF
    )
    assert code == 201
    assert answer["spec"]["resourceAttributes"] == {
        "namespace": "ml",
        "verb": "get",
        "resource": "pods",
    }
    assert answer["status"]["allowed"] is True
    code, status = http(
        api, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", b"junk", PROTOBUF
    )
    assert code == 400 and "magic" in status["message"]


def test_whoami_names_the_service_account_of_a_token(api: SimApiServer) -> None:
    http(api, "POST", "/api/v1/nodes", node_object("gpu-a"))
    token = http(
        api,
        "POST",
        "/api/v1/namespaces/devicedeck/serviceaccounts/agent/token",
        {"spec": {"audiences": ["https://kubernetes.default.svc.cluster.local"]}},
    )[1]["status"]["token"]
    code, answer = http(
        api,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        token=token,
    )
    assert code == 201
    assert answer["status"]["userInfo"]["username"] == "system:serviceaccount:devicedeck:agent"
