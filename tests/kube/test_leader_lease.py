"""Leader election through a Lease on the simulated API server, which answers writes as the
real one does (a stale resourceVersion is 409 Conflict). The electors here run with short
durations so the tests do not sit out 15-second leases; the rules are the same."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devicedeck.config import KubeMode, Settings
from devicedeck.kube.client import KubeApi
from devicedeck.kube.lease import LeaseElection, lease_namespace
from devicedeck.sim.apiserver import SimApiServer
from devicedeck.sim.apiserver.errors import ApiError
from devicedeck.sim.apiserver.handler import Request

NAMESPACE = "devicedeck"
NAME = "devicedeck-leader"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{NAME}"
# Generous for a busy machine: every wait ends as soon as its outcome is there.
DEADLINE = 30.0


class InterferingApiServer(SimApiServer):
    """Runs `interfere` once, just before serving the next replace of the Lease: as if another
    replica's write had landed between the elector's read and its write."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.interfere: Callable[[], None] | None = None
        # Called with every request; raising ApiError answers it.
        self.check: Callable[[Request], None] = lambda request: None
        self.answered_puts = 0

    def before(self, request: Request) -> None:
        self.check(request)
        if request.method == "PUT" and request.path == LEASE_PATH:
            self.answered_puts += 1
            interfere, self.interfere = self.interfere, None
            if interfere is not None:
                interfere()


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[InterferingApiServer]:
    server = InterferingApiServer(tmp_path / "cluster").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def api(sim: SimApiServer, tmp_path: Path) -> Iterator[KubeApi]:
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    api = KubeApi.from_settings(Settings(kube=KubeMode.KUBECONFIG, kubeconfig=str(kubeconfig)))
    try:
        yield api
    finally:
        api.close()


def elector(api: KubeApi, identity: str) -> LeaseElection:
    return LeaseElection(
        api, NAMESPACE, NAME, identity, lease_duration=4, renew_deadline=2.5, retry=0.3
    )


class Work:
    """Leader-only work that records how many copies run at once and how often it started."""

    def __init__(self) -> None:
        self.running: list[str] = []
        self.starts: list[str] = []
        self.overlaps = 0

    def for_(self, who: str) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            self.starts.append(who)
            self.running.append(who)
            if len(self.running) > 1:
                self.overlaps += 1
            try:
                await asyncio.Future()
            finally:
                self.running.remove(who)

        return work


async def until(check: Callable[[], Any], what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while not (value := check()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {DEADLINE}s waiting for {what}")
        await asyncio.sleep(0.05)
    return value


def stored_lease(sim: SimApiServer) -> dict[str, Any]:
    lease = sim.store.find("leases", f"{NAMESPACE}/{NAME}")
    assert lease is not None
    return lease


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_conflicting_write_stops_the_leader_and_the_winner_keeps_the_lease(
    sim: InterferingApiServer, api: KubeApi
) -> None:
    work = Work()
    election = elector(api, "replica-a_1")

    def another_replica_takes_over() -> None:
        lease = stored_lease(sim)
        lease["spec"] = {**lease["spec"], "holderIdentity": "replica-b_2"}
        sim.store.put("leases", lease)  # a new resourceVersion: the elector's read is stale

    async def scenario() -> None:
        task = asyncio.create_task(election.run(work.for_("a")))
        try:
            await until(lambda: work.running == ["a"], "replica a to lead")
            assert election.leading
            assert stored_lease(sim)["spec"]["holderIdentity"] == "replica-a_1"

            puts = sim.answered_puts
            sim.interfere = another_replica_takes_over
            # The renewal's PUT carries the version read before the other write: 409.
            await until(lambda: not work.running, "the leader-only work to stop")
            assert not election.leading
            assert sim.answered_puts == puts + 1
            # The elector wrote nothing over the winner's record after its conflict.
            lease = stored_lease(sim)
            assert lease["spec"]["holderIdentity"] == "replica-b_2"
            version = lease["metadata"]["resourceVersion"]

            # B renews nothing: after its duration, measured from when a saw it, a takes over.
            await until(lambda: work.running == ["a"], "replica a to take the lease back")
            lease = stored_lease(sim)
            assert lease["spec"]["holderIdentity"] == "replica-a_1"
            assert int(lease["metadata"]["resourceVersion"]) > int(version)
            assert lease["spec"]["leaseTransitions"] == 1
        finally:
            await stop(task)
        assert work.starts == ["a", "a"] and work.overlaps == 0

    asyncio.run(scenario())
    # Stopping gave the Lease up: no holder, so the next candidate need not wait.
    assert stored_lease(sim)["spec"]["holderIdentity"] == ""


def test_two_candidates_one_leads_and_the_other_takes_over_when_it_stops(
    sim: SimApiServer, api: KubeApi
) -> None:
    work = Work()
    electors = {"a": elector(api, "replica-a_1"), "b": elector(api, "replica-b_2")}

    async def scenario() -> None:
        tasks = {w: asyncio.create_task(e.run(work.for_(w))) for w, e in electors.items()}
        try:
            await until(lambda: len(work.running) == 1, "a leader")
            (leader,) = work.running
            follower = "b" if leader == "a" else "a"
            holder = stored_lease(sim)["spec"]["holderIdentity"]
            assert holder == electors[leader].identity
            # The follower keeps trying, and keeps failing, while the leader renews.
            renewals = stored_lease(sim)["metadata"]["resourceVersion"]
            await until(
                lambda: stored_lease(sim)["metadata"]["resourceVersion"] != renewals,
                "a renewal",
            )
            assert work.running == [leader] and not electors[follower].leading

            await stop(tasks.pop(leader))
            await until(lambda: work.running == [follower], "the follower to take over")
            assert stored_lease(sim)["spec"]["holderIdentity"] == electors[follower].identity
        finally:
            for task in tasks.values():
                await stop(task)
        assert work.overlaps == 0
        assert len(work.starts) == 2

    asyncio.run(scenario())


def test_a_leader_that_cannot_renew_stops_before_another_takes_over(
    sim: InterferingApiServer, api: KubeApi
) -> None:
    work = Work()
    electors = {"a": elector(api, "replica-a_1"), "b": elector(api, "replica-b_2")}
    cut_off: set[str] = set()

    def refuse_writes_of_cut_off_replicas(request: Request) -> None:
        if request.method == "PUT" and any(who.encode() in request.body for who in cut_off):
            raise ApiError(503, "ServiceUnavailable", "the replica's network is down")

    sim.check = refuse_writes_of_cut_off_replicas

    async def scenario() -> None:
        tasks = {w: asyncio.create_task(e.run(work.for_(w))) for w, e in electors.items()}
        try:
            await until(lambda: len(work.running) == 1, "a leader")
            (leader,) = work.running
            follower = "b" if leader == "a" else "a"
            cut_off.add(electors[leader].identity)
            # The leader gives up after its renew deadline; the follower takes over after
            # the lease duration; never both at once.
            await until(lambda: work.running == [follower], "the follower to take over")
            assert not electors[leader].leading
            assert stored_lease(sim)["spec"]["holderIdentity"] == electors[follower].identity
        finally:
            cut_off.clear()
            for task in tasks.values():
                await stop(task)
        assert work.overlaps == 0

    asyncio.run(scenario())


def test_the_lease_namespace_comes_from_the_setting_the_pod_or_the_kubeconfig(
    tmp_path: Path,
) -> None:
    own = tmp_path / "namespace"
    own.write_text("devicedeck\n")
    incluster = Settings(kube=KubeMode.INCLUSTER)
    assert lease_namespace(incluster, own) == "devicedeck"
    assert lease_namespace(incluster, tmp_path / "missing") == "default"
    chosen = Settings(kube=KubeMode.INCLUSTER, leader_lease_namespace="ops")
    assert lease_namespace(chosen, own) == "ops"

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: tools}}]\n"
    )
    from_context = Settings(kube=KubeMode.KUBECONFIG, kubeconfig=str(kubeconfig))
    assert lease_namespace(from_context, own) == "tools"
