"""Two `devicedeck serve` replicas on one database: both serve, one at a time runs the work
that must run once (the stale sweep here), and the other takes over when it stops."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from agent.helpers import DEVICEDECK, Process, Service, wait_until

from .conftest import dev, listandwatch

TAKEOVER_DEADLINE = 30.0


def leading(service: Service) -> bool:
    metrics = httpx.get(f"{service.url}/metrics", timeout=10).text
    found = re.search(r"^devicedeck_leader (\S+)$", metrics, re.MULTILINE)
    assert found, "devicedeck_leader is missing from /metrics"
    return float(found.group(1)) == 1.0


def stale_events(service: Service, token: str) -> list[str]:
    answer = httpx.get(
        f"{service.url}/api/v1/events",
        params={"kind": "node_stale", "limit": 1000},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    answer.raise_for_status()
    return sorted(event["node"] for event in answer.json()["results"])


def test_one_replica_leads_and_the_other_takes_over(database_url: str, tmp_path: Path) -> None:
    replicas = [Service(database_url, tmp_path), Service(database_url, tmp_path)]
    for replica in replicas:
        replica.env["DEVICEDECK_STALE_AFTER"] = "2"
        replica.start()
    try:
        token = replicas[0].create_token("replicas", "ingest", "read")

        running = list(replicas)

        def one_leader() -> Service | None:
            leaders = [r for r in running if leading(r)]
            # Never two at once, at any moment this test looks.
            assert len(leaders) <= 1, "two replicas lead at once"
            return leaders[0] if leaders else None

        leader = wait_until(one_leader, timeout=TAKEOVER_DEADLINE, message="a leader")
        follower = next(r for r in replicas if r is not leader)

        def post_to(service: Service, node: str) -> None:
            answer = httpx.post(
                f"{service.url}/api/v1/ingest/listandwatch",
                json=listandwatch(node, [dev("gpu-0")], 1),
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text

        # Both serve; the leader's sweep marks the node stale, once.
        post_to(follower, "node-1")
        wait_until(
            lambda: stale_events(follower, token) == ["node-1"],
            timeout=TAKEOVER_DEADLINE,
            message="node-1 marked stale",
        )

        leader.stop()
        running.remove(leader)
        assert wait_until(one_leader, timeout=TAKEOVER_DEADLINE, message="a new leader") is (
            follower
        )
        post_to(follower, "node-2")
        wait_until(
            lambda: stale_events(follower, token) == ["node-1", "node-2"],
            timeout=TAKEOVER_DEADLINE,
            message="node-2 marked stale by the new leader",
        )

        # The old leader comes back as a follower: the lock stays where it is.
        leader.start()
        running.append(leader)
        assert one_leader() is follower and not leading(leader)
        assert stale_events(leader, token) == ["node-1", "node-2"]
    finally:
        for replica in replicas:
            replica.stop()


def test_serve_with_workers(database_url: str, tmp_path: Path) -> None:
    """`serve --workers 2`: two processes answer on one port; the work only one process may
    do still runs, once."""
    service = Service(database_url, tmp_path)
    service.create_token("bootstrap", "read")  # migrates the database first
    token = service.create_token("workers", "ingest", "read")
    argv = [DEVICEDECK, "serve", "--port", str(service.port), "--workers", "2"]
    process = Process("workers", argv, tmp_path, {**service.env, "DEVICEDECK_STALE_AFTER": "2"})
    process.start()
    try:
        # Each worker process imports and builds the whole app: slow on a busy machine.
        wait_until(lambda: service_answers(service), timeout=180, message="the workers")
        answer = httpx.post(
            f"{service.url}/api/v1/ingest/listandwatch",
            json=listandwatch("node-1", [dev("gpu-0")], 1),
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        wait_until(
            lambda: stale_events(service, token) == ["node-1"],
            timeout=TAKEOVER_DEADLINE,
            message="node-1 marked stale",
        )
        assert stale_events(service, token) == ["node-1"]
        wait_until(
            lambda: process.output().count("Started server process") == 2,
            timeout=180,
            message="both workers started",
        )
        # One of the two led, and nothing made the other lead as well.
        assert process.output().count("leading: this process runs") == 1
    finally:
        process.stop()


def service_answers(service: Service) -> bool:
    try:
        return httpx.get(f"{service.url}/livez", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
