"""The DRA list endpoints send as many SQL statements for 3 nodes' devices as for 30."""

from __future__ import annotations

from typing import Any

from devicedeck.clock import utcnow
from devicedeck.db import write_session
from devicedeck.kube import dra_sync, node_sync, pod_sync

from .conftest import Api, StatementCounter

DRIVER = "gpu.example.com"


def _result(pool: str, device: str, **extra: Any) -> dict[str, Any]:
    return {"request": "gpu", "driver": DRIVER, "pool": pool, "device": device, **extra}


def _claim(ns: str, name: str, results: list[dict[str, Any]], pod: str = "") -> dict[str, Any]:
    reserved = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}] if pod else []
    ready = [{"type": "Ready", "status": "True"}]
    return {
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{ns}-{name}"},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": reserved,
            "devices": [
                {k: r.get(k) for k in ("driver", "pool", "device", "shareID")}
                | {"conditions": ready}
                for r in results
            ],
        },
    }


def _cluster(nodes: range) -> dict[str, list[dict[str, Any]]]:
    """Per node: a Node, a slice of 3 GPUs (one shareable), a pod holding gpu-0 through a
    template claim, two shares of gpu-2, a monitor's admin claim; one rack-wide selector slice."""
    cluster: dict[str, list[dict[str, Any]]] = {"nodes": [], "slices": [], "claims": [], "pods": []}
    for n in nodes:
        name = f"node-{n:02d}"
        cluster["nodes"].append(
            {"metadata": {"name": name, "labels": {"rack": "r1"}}, "status": {"capacity": {}}}
        )
        devices = [
            {"name": f"gpu-{i}", "capacity": {"memory": {"value": "80Gi"}}} for i in range(3)
        ]
        devices[2]["allowMultipleAllocations"] = True
        cluster["slices"].append(
            {
                "metadata": {"name": f"{name}-gpus"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )

        pod = f"trainer-{n:02d}"
        eight = {"memory": "8Gi"}
        shares = [_result(name, "gpu-2", shareID=f"{x}-{n}", consumedCapacity=eight) for x in "ab"]
        cluster["claims"] += [
            _claim("ml", f"{pod}-gpu-x", [_result(name, "gpu-0")], pod=pod),
            _claim("ml", f"a-{n}", shares[:1]),
            _claim("ml", f"b-{n}", shares[1:]),
            _claim(
                "mon", f"mon-{n}", [_result(name, f"gpu-{i}", adminAccess=True) for i in range(3)]
            ),
        ]
        cluster["pods"].append(
            {
                "metadata": {"namespace": "ml", "name": pod, "uid": f"uid-{pod}"},
                "spec": {
                    "nodeName": name,
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
                    "containers": [{"name": "main"}],
                },
                "status": {
                    "phase": "Running",
                    "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"{pod}-gpu-x"}],
                },
            }
        )
    cluster["slices"].append(
        {
            "metadata": {"name": "rack-r1"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "rack-r1", "generation": 1, "resourceSliceCount": 1},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
                    ]
                },
                "devices": [{"name": f"switch-{i}"} for i in range(len(nodes))],
            },
        }
    )
    return cluster


def _write(api: Api, nodes: range) -> None:
    factory = api.client.app.state.session_factory  # type: ignore[attr-defined]
    cluster = _cluster(nodes)
    now = utcnow()
    with write_session(factory) as session:
        node_sync.apply_node_list(session, cluster["nodes"], now)
        dra_sync.apply_slice_list(session, cluster["slices"], now)
        dra_sync.apply_claim_list(session, cluster["claims"], now)
        pod_sync.apply_pod_list(session, cluster["pods"], now)


ENDPOINTS = [
    ("/api/v1/dra/devices", {}),
    ("/api/v1/dra/devices", {"node": "node-01"}),
    ("/api/v1/dra/devices", {"allocated": "false"}),
    ("/api/v1/cluster/pods", {}),
]


def test_dra_list_statement_counts_do_not_grow_with_items(
    quiet_api: Api, statements: StatementCounter
) -> None:
    def counts() -> dict[str, int]:
        found = {}
        for path, params in ENDPOINTS:
            quiet_api.get(path, limit=1000, **params)
            with statements:
                page = quiet_api.get(path, limit=1000, **params)
            assert page["results"], (path, params)
            found[f"{path} {params}"] = statements.count
        return found

    _write(quiet_api, range(3))
    few = counts()
    _write(quiet_api, range(30))
    many = counts()
    assert many == few
    assert max(few.values()) <= 12, few
