"""Two `devicedeck serve` replicas with cluster access elect their leader with a Lease on the
(simulated) API server: one runs the cluster watcher and the stale sweep, the Lease names it,
and when it stops, cleanly or by a crash, the other takes over; nothing runs twice."""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent.helpers import Service, wait_until

from devicedeck.clock import utcnow
from devicedeck.sim.apiserver import SimApiServer
from devicedeck.sim.apiserver.handler import Request
from devicedeck.sim.apiserver.server import write_kubeconfig

from .objects import node

NAMESPACE = "devicedeck"
LEASE = "devicedeck-leader"
GPU = "example.com/gpu"
# The promise: another replica takes over within 30 s (a crashed leader's Lease has
# to run out first: 15 s).
TAKEOVER_DEADLINE = 30.0


class WatchRecordingApiServer(SimApiServer):
    """Records which replica (told apart by its token) opened each watch."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.replica_by_token: dict[str, str] = {}
        self.watches: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def before(self, request: Request) -> None:
        if request.watching:
            token = request.headers.get("authorization", "")[len("Bearer ") :]
            with self._lock:
                self.watches.append((self.replica_by_token.get(token, "?"), request.path))

    def watchers(self, since: int = 0) -> set[str]:
        with self._lock:
            return {who for who, _ in self.watches[since:]}

    def lease(self) -> dict[str, Any] | None:
        """The Lease as any client reads it from the API server."""
        answer = httpx.get(
            f"{self.url}/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}",
            headers={"Authorization": f"Bearer {self.store.admin_token}"},
            timeout=10,
        )
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        lease: dict[str, Any] = answer.json()
        return lease


def replica(name: str, api: WatchRecordingApiServer, database_url: str, tmp_path: Path) -> Service:
    """A replica with its own ServiceAccount token in its own kubeconfig."""
    token = api.tokens.request(NAMESPACE, name, {"spec": {}})["status"]["token"]
    api.replica_by_token[token] = name
    kubeconfig = write_kubeconfig(tmp_path / f"{name}.kubeconfig", api.url, token)
    logs = tmp_path / name
    logs.mkdir()
    service = Service(database_url, logs)
    service.env.update(
        DEVICEDECK_KUBE="kubeconfig",
        DEVICEDECK_KUBECONFIG=str(kubeconfig),
        DEVICEDECK_LEADER_LEASE_NAMESPACE=NAMESPACE,
        DEVICEDECK_STALE_AFTER="2",
    )
    return service


def leading(service: Service) -> bool:
    metrics = httpx.get(f"{service.url}/metrics", timeout=10).text
    found = re.search(r"^devicedeck_leader (\S+)$", metrics, re.MULTILINE)
    assert found, "devicedeck_leader is missing from /metrics"
    return float(found.group(1)) == 1.0


def identity(service: Service) -> str:
    return f"{socket.gethostname()}_{service.pid}"


# Replicas share PostgreSQL in production; the Lease does not depend on the database, so one
# database is enough (each run takes minutes).
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_one_replica_holds_the_lease_and_the_other_takes_over(
    database_url: str, tmp_path: Path
) -> None:
    api = WatchRecordingApiServer(tmp_path / "cluster").start()
    replicas = {
        name: replica(name, api, database_url, tmp_path) for name in ("replica-a", "replica-b")
    }
    running: dict[str, Service] = {}
    try:
        for name, service in replicas.items():
            service.start()
            running[name] = service
        token = replicas["replica-a"].create_token("lease", "ingest", "read")
        headers = {"Authorization": f"Bearer {token}"}

        def one_leader() -> str | None:
            leaders = [name for name, r in running.items() if leading(r)]
            # Never two at once, at any moment this test looks.
            assert len(leaders) <= 1, f"two replicas lead at once: {leaders}"
            return leaders[0] if leaders else None

        def holder() -> str | None:
            lease = api.lease()
            return (lease or {}).get("spec", {}).get("holderIdentity")

        def ingest(service: Service, name: str) -> None:
            answer = httpx.post(
                f"{service.url}/api/v1/ingest/listandwatch",
                json={
                    "node": name,
                    "resource": GPU,
                    "source": {"boot_id": "boot-1", "seq": 1},
                    "observed_at": utcnow().isoformat(),
                    "devices": [{"ID": "gpu-0", "health": "Healthy"}],
                },
                headers=headers,
                timeout=30,
            )
            assert answer.status_code == 200, answer.text

        def synced_from_the_cluster(service: Service, name: str) -> bool:
            answer = httpx.get(f"{service.url}/api/v1/nodes/{name}", headers=headers, timeout=10)
            return answer.status_code == 200 and answer.json()["capacity"].get(GPU) == "1"

        def stale_events(service: Service) -> list[str]:
            answer = httpx.get(
                f"{service.url}/api/v1/events",
                params={"kind": "node_stale", "limit": 1000},
                headers=headers,
                timeout=10,
            )
            answer.raise_for_status()
            return sorted(event["node"] for event in answer.json()["results"])

        leader = wait_until(one_leader, timeout=TAKEOVER_DEADLINE, message="a leader")
        follower = next(name for name in replicas if name != leader)
        # The Lease, as kubectl would show it, names the leader's process.
        wait_until(
            lambda: holder() == identity(replicas[leader]), message="the lease naming the leader"
        )
        assert (api.lease() or {})["spec"]["leaseDurationSeconds"] == 15

        # Only the leader watches the cluster; what it sees every replica serves.
        ingest(replicas[follower], "node-1")
        api.store.put("nodes", node("node-1", capacity={GPU: "1"}))
        wait_until(
            lambda: synced_from_the_cluster(replicas[follower], "node-1"),
            message="node-1 synced from the API server by the leader",
        )
        assert api.watchers() == {leader}
        # Only the leader sweeps: node-1 turns stale once.
        wait_until(
            lambda: stale_events(replicas[follower]) == ["node-1"],
            timeout=TAKEOVER_DEADLINE,
            message="node-1 marked stale",
        )

        # A clean stop gives the Lease up; the follower takes over.
        watches_before = len(api.watches)
        replicas[leader].stop()
        del running[leader]
        assert wait_until(one_leader, timeout=TAKEOVER_DEADLINE, message="a new leader") == follower
        wait_until(lambda: holder() == identity(replicas[follower]), message="the lease naming it")
        ingest(replicas[follower], "node-2")
        api.store.put("nodes", node("node-2", capacity={GPU: "1"}))
        wait_until(
            lambda: synced_from_the_cluster(replicas[follower], "node-2"),
            message="node-2 synced by the new leader",
        )
        assert api.watchers(since=watches_before) == {follower}
        wait_until(
            lambda: stale_events(replicas[follower]) == ["node-1", "node-2"],
            timeout=TAKEOVER_DEADLINE,
            message="node-2 marked stale by the new leader",
        )

        # The old leader comes back as a follower: the Lease stays where it is.
        replicas[leader].start()
        running[leader] = replicas[leader]
        assert one_leader() == follower and holder() == identity(replicas[follower])

        # A crash gives nothing up: the Lease runs out, then the other takes over.
        replicas[follower].kill()
        del running[follower]
        assert wait_until(one_leader, timeout=TAKEOVER_DEADLINE, message="a leader again") == (
            leader
        )
        assert holder() == identity(replicas[leader])
        ingest(replicas[leader], "node-3")
        wait_until(
            lambda: stale_events(replicas[leader]) == ["node-1", "node-2", "node-3"],
            timeout=TAKEOVER_DEADLINE,
            message="node-3 marked stale by the replica that took over",
        )
        # Each leadership began once in each process's log.
        for name in replicas:
            assert replicas[name].output().count("leading: this process runs") <= 1
    finally:
        for service in replicas.values():
            service.stop()
        api.stop()
