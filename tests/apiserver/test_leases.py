"""coordination.k8s.io/v1 Leases on the simulated API server, with the real API server's update
rules: a replace must carry the resourceVersion it read (a stale one is 409 Conflict, none at
all 422), a PUT of a missing lease creates it, and the spec's numbers are checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from devicedeck.sim.apiserver import SimApiServer

from .conftest import http
from .test_kubectl import kubectl, needs_kubectl

LEASES = "/apis/coordination.k8s.io/v1/namespaces/devicedeck/leases"


def lease(holder: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "devicedeck-leader"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, **spec},
    }


@pytest.fixture
def coordination(api_client: k8s.ApiClient) -> k8s.CoordinationV1Api:
    return k8s.CoordinationV1Api(api_client)


def test_discovery_lists_leases(api: SimApiServer) -> None:
    groups = {g["name"] for g in http(api, "GET", "/apis")[1]["groups"]}
    assert "coordination.k8s.io" in groups
    code, resources = http(api, "GET", "/apis/coordination.k8s.io/v1")
    assert code == 200
    (entry,) = resources["resources"]
    assert (entry["name"], entry["kind"], entry["namespaced"]) == ("leases", "Lease", True)
    assert {"create", "get", "update"} <= set(entry["verbs"])


def test_create_get_and_replace_through_the_official_client(
    coordination: k8s.CoordinationV1Api,
) -> None:
    body = k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(name="devicedeck-leader"),
        spec=k8s.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    created = coordination.create_namespaced_lease("devicedeck", body)
    assert created.metadata.namespace == "devicedeck"
    read = coordination.read_namespaced_lease("devicedeck-leader", "devicedeck")
    assert read.spec.holder_identity == "a"
    assert read.metadata.resource_version == created.metadata.resource_version

    read.spec.holder_identity = "b"
    replaced = coordination.replace_namespaced_lease("devicedeck-leader", "devicedeck", read)
    assert replaced.spec.holder_identity == "b"
    assert int(replaced.metadata.resource_version) > int(read.metadata.resource_version)

    # A second writer still holding the version read before "b" was written loses.
    read.spec.holder_identity = "c"
    with pytest.raises(k8s.ApiException) as caught:
        coordination.replace_namespaced_lease("devicedeck-leader", "devicedeck", read)
    assert caught.value.status == 409
    current = coordination.read_namespaced_lease("devicedeck-leader", "devicedeck")
    assert current.spec.holder_identity == "b"


def test_a_stale_resource_version_is_a_conflict_and_changes_nothing(api: SimApiServer) -> None:
    code, created = http(api, "POST", LEASES, lease("a"))
    assert code == 201
    stale = created["metadata"]["resourceVersion"]
    code, updated = http(
        api, "PUT", f"{LEASES}/devicedeck-leader", {**created, "spec": lease("b")["spec"]}
    )
    assert code == 200 and updated["spec"]["holderIdentity"] == "b"

    body = {**created, "spec": lease("c")["spec"]}
    body["metadata"] = {**created["metadata"], "resourceVersion": stale}
    code, status = http(api, "PUT", f"{LEASES}/devicedeck-leader", body)
    assert code == 409
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "devicedeck-leader": the '
        "object has been modified; please apply your changes to the latest version and try again"
    )
    assert http(api, "GET", f"{LEASES}/devicedeck-leader")[1] == updated


def test_a_replace_without_a_resource_version_is_refused(api: SimApiServer) -> None:
    http(api, "POST", LEASES, lease("a"))
    code, status = http(api, "PUT", f"{LEASES}/devicedeck-leader", lease("b"))
    assert code == 422
    assert status["reason"] == "Invalid"
    assert status["message"] == (
        'leases.coordination.k8s.io "devicedeck-leader" is invalid: metadata.resourceVersion: '
        "Invalid value: 0: must be specified for an update"
    )
    assert http(api, "GET", f"{LEASES}/devicedeck-leader")[1]["spec"]["holderIdentity"] == "a"


def test_a_put_of_a_missing_lease_creates_it(api: SimApiServer) -> None:
    code, created = http(api, "PUT", f"{LEASES}/devicedeck-leader", lease("a"))
    assert code == 201
    assert created["metadata"]["namespace"] == "devicedeck"
    assert created["metadata"]["resourceVersion"]
    code, status = http(api, "PUT", f"{LEASES}/other", lease("a"))
    assert code == 400
    assert "does not match the name on the URL" in status["message"]
    assert http(api, "GET", f"{LEASES}/other")[0] == 404


def test_two_creates_one_wins(api: SimApiServer) -> None:
    assert http(api, "POST", LEASES, lease("a"))[0] == 201
    code, status = http(api, "POST", LEASES, lease("b"))
    assert (code, status["reason"]) == (409, "AlreadyExists")
    assert http(api, "GET", f"{LEASES}/devicedeck-leader")[1]["spec"]["holderIdentity"] == "a"


@pytest.mark.parametrize(
    ("spec", "code", "field"),
    [
        ({"leaseDurationSeconds": 0}, 422, "spec.leaseDurationSeconds"),
        ({"leaseTransitions": -1}, 422, "spec.leaseTransitions"),
        ({"leaseDurationSeconds": "15"}, 400, "spec.leaseDurationSeconds"),
        ({"holderIdentity": 7}, 400, "spec.holderIdentity"),
    ],
)
def test_bad_spec_values_are_refused_by_field(
    api: SimApiServer, spec: dict[str, Any], code: int, field: str
) -> None:
    answer_code, status = http(api, "POST", LEASES, lease("a", **spec))
    assert answer_code == code
    assert field in status["message"]
    assert http(api, "GET", f"{LEASES}/devicedeck-leader")[0] == 404


def test_leases_are_listed_per_namespace(api: SimApiServer) -> None:
    http(api, "POST", LEASES, lease("a"))
    other = "/apis/coordination.k8s.io/v1/namespaces/other/leases"
    http(api, "POST", other, lease("b"))
    names = [
        (i["metadata"]["namespace"], i["spec"]["holderIdentity"])
        for i in http(api, "GET", LEASES)[1]["items"]
    ]
    assert names == [("devicedeck", "a")]
    everywhere = http(api, "GET", "/apis/coordination.k8s.io/v1/leases")[1]["items"]
    assert len(everywhere) == 2


@needs_kubectl
def test_kubectl_reads_the_holder(api: SimApiServer, kubeconfig: Path) -> None:
    http(api, "POST", LEASES, lease("replica-a_42"))
    shown = kubectl(
        kubeconfig,
        "-n",
        "devicedeck",
        "get",
        "lease",
        "devicedeck-leader",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    )
    assert shown.stdout == "replica-a_42"
