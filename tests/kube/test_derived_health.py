"""Derived health weighed against the Node's status, with the simulated API server: a device
the kubelet no longer offers on an untapped node is unhealthy while capacity still counts it,
removed when capacity falls, back when it is offered or counted again; without a Node status
it says it may be either."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from ui.signin import sign_in

from devicedeck.clock import utcnow

from .conftest import StartApp, wait_for
from .fake_apiserver import FakeApiServer
from .objects import node

GPU = "example.com/gpu"
NODE = "node-a"
AGENT = "agent-a"
ACTOR = f"{AGENT}@{NODE}"
NO_STATUS_WORDS = "Not offered by the kubelet: may be unhealthy or removed"

Snapshot = Callable[[dict[str, str]], dict[str, Any]]


class Cluster:
    """The service, its agent's token, and the simulated API server holding node-a."""

    def __init__(self, client: TestClient, fake_api: FakeApiServer, agent: str, reader: str):
        self.client = client
        self.fake_api = fake_api
        self.agent = {"Authorization": f"Bearer {agent}"}
        self.reader = {"Authorization": f"Bearer {reader}"}
        self.seq = 0
        self.boot = "boot-1"
        self.last: dict[str, str] = {}

    def derived(self, devices: dict[str, str]) -> dict[str, Any]:
        """Post the agent's derived device list for node-a (what the kubelet offers is Healthy)."""
        self.seq += 1
        self.last = dict(devices)
        body = {
            "node": NODE,
            "resource": GPU,
            "source": {"boot_id": self.boot, "seq": self.seq},
            "observed_at": utcnow().isoformat(),
            "health_source": "derived",
            "devices": [{"ID": d, "health": h} for d, h in devices.items()],
        }
        response = self.client.post("/api/v1/ingest/listandwatch", json=body, headers=self.agent)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def heartbeat(self) -> dict[str, Any]:
        """Post the last device list again, as the agent's heartbeat does."""
        return self.derived(self.last)

    def judged(self, capacity: int, allocatable: int) -> None:
        """The Node's status changes, the service holds it, and the agent's next snapshot, its
        heartbeat here, is judged with it."""
        self.status(capacity, allocatable)
        self.synced(capacity, allocatable)
        self.heartbeat()

    def status(self, capacity: int, allocatable: int) -> None:
        self.fake_api.put(
            "nodes", node(NODE, capacity={GPU: str(capacity)}, allocatable={GPU: str(allocatable)})
        )

    def synced(self, capacity: int, allocatable: int) -> None:
        """Wait until the service holds this Node status."""

        def seen() -> bool:
            detail = self.client.get(f"/api/v1/nodes/{NODE}", headers=self.reader)
            if detail.status_code != 200:
                return False
            body = detail.json()
            return bool(
                body["kube_synced_at"]
                and body["capacity"].get(GPU) == str(capacity)
                and body["allocatable"].get(GPU) == str(allocatable)
            )

        wait_for(seen, what=f"node status capacity {capacity}, allocatable {allocatable}")

    def devices(self) -> dict[str, dict[str, Any]]:
        response = self.client.get(
            "/api/v1/devices",
            params={"node": NODE, "state": "any", "limit": 100},
            headers=self.reader,
        )
        assert response.status_code == 200, response.text
        return {d["device_id"]: d for d in response.json()["results"]}

    def device(self, device_id: str) -> dict[str, Any]:
        pk = self.devices()[device_id]["id"]
        response = self.client.get(f"/api/v1/devices/{pk}", headers=self.reader)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def state_of(self, device_id: str) -> tuple[str, str]:
        found = self.devices()[device_id]
        return found["state"], found["health"]

    def events(self, kind: str, device_id: str | None) -> list[dict[str, Any]]:
        response = self.client.get(
            "/api/v1/events",
            params={"node": NODE, "kind": kind, "limit": 100},
            headers=self.reader,
        )
        assert response.status_code == 200, response.text
        return [e for e in response.json()["results"] if e["device_id"] == device_id]


def _cluster(
    start_app: StartApp, fake_api: FakeApiServer, make_token: Callable[..., str]
) -> Cluster:
    agent = make_token("ingest", name=AGENT, node=NODE)
    reader = make_token("read", name="reader")
    return Cluster(start_app(), fake_api, agent, reader)


FOUR = {f"gpu-{i}": "Healthy" for i in range(4)}


def _four_healthy_gpus(
    start_app: StartApp, fake_api: FakeApiServer, make_token: Callable[..., str]
) -> Cluster:
    """A node whose status and derived list agree on four healthy GPUs."""
    cluster = _cluster(start_app, fake_api, make_token)
    cluster.status(4, 4)
    cluster.synced(4, 4)
    cluster.derived(FOUR)
    return cluster


def test_an_unplugged_device_is_removed_once_capacity_falls(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _four_healthy_gpus(start_app, fake_api, make_token)

    # The kubelet stops offering gpu-3 before its Node status says why: nothing is judged yet.
    cluster.derived(FOUR | {"gpu-3": "Unhealthy"})
    assert cluster.state_of("gpu-3") == ("present", "Unhealthy")

    # Capacity and allocatable fall together: it was unplugged. The status is newer than the
    # device list it agrees with, so it waits for the agent's next snapshot to be judged.
    cluster.status(3, 3)
    cluster.synced(3, 3)
    assert cluster.state_of("gpu-3") == ("present", "Unhealthy")
    cluster.heartbeat()
    assert cluster.state_of("gpu-3")[0] == "removed"
    assert {d: s["state"] for d, s in cluster.devices().items()} == {
        "gpu-0": "present",
        "gpu-1": "present",
        "gpu-2": "present",
        "gpu-3": "removed",
    }
    removed = cluster.events("device_removed", "gpu-3")
    assert [e["actor"] for e in removed] == [ACTOR]
    assert "capacity" in removed[0]["after"]["reason"]
    assert "no longer counted in the Node's capacity" in cluster.device("gpu-3")["health_detail"]

    # The agent still lists it (it remembers what it saw): the next snapshot, unchanged or
    # not, leaves it removed and brings nothing back.
    cluster.derived(FOUR | {"gpu-3": "Unhealthy"})
    cluster.derived(FOUR | {"gpu-3": "Unhealthy"})
    assert cluster.state_of("gpu-3") == ("removed", "Unhealthy")
    assert cluster.events("device_reappeared", "gpu-3") == []

    # Plugged in again: offered, so present and Healthy, credited to the agent.
    cluster.derived(FOUR)
    assert cluster.state_of("gpu-3") == ("present", "Healthy")
    assert [e["actor"] for e in cluster.events("device_reappeared", "gpu-3")] == [ACTOR]
    cluster.status(4, 4)
    cluster.synced(4, 4)
    assert cluster.state_of("gpu-3") == ("present", "Healthy")


def test_a_snapshot_after_the_status_removes_it_and_names_the_agent(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _four_healthy_gpus(start_app, fake_api, make_token)

    # The Node status arrives first: it does not match the device list yet, so nothing moves.
    cluster.status(3, 3)
    cluster.synced(3, 3)
    assert cluster.state_of("gpu-3") == ("present", "Healthy")

    result = cluster.derived(FOUR | {"gpu-3": "Unhealthy"})
    assert result["removed"] == 1
    assert cluster.state_of("gpu-3") == ("removed", "Unhealthy")
    assert [e["actor"] for e in cluster.events("device_removed", "gpu-3")] == [ACTOR]


def test_an_unhealthy_device_stays_present_and_unhealthy(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _four_healthy_gpus(start_app, fake_api, make_token)

    # Capacity unchanged, allocatable down: the kubelet counts it unhealthy.
    cluster.derived(FOUR | {"gpu-2": "Unhealthy"})
    cluster.status(4, 3)
    cluster.synced(4, 3)
    cluster.derived(FOUR | {"gpu-2": "Unhealthy"})
    device = cluster.device("gpu-2")
    assert (device["state"], device["health"], device["health_source"]) == (
        "present",
        "Unhealthy",
        "derived",
    )
    assert device["health_detail"] == (
        "Not offered by the kubelet; the Node's status counts 1 of its 4 devices unhealthy"
    )
    assert cluster.events("device_removed", "gpu-2") == []


def test_one_of_two_unhealthy_unplugged_is_not_guessed_and_neither_is_removed(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _cluster(start_app, fake_api, make_token)
    cluster.status(4, 2)
    cluster.synced(4, 2)
    cluster.derived(FOUR | {"gpu-1": "Unhealthy"})
    cluster.derived(FOUR | {"gpu-1": "Unhealthy", "gpu-2": "Unhealthy"})
    assert cluster.state_of("gpu-1") == ("present", "Unhealthy")
    assert cluster.devices()["gpu-2"]["presence"] == "present"

    # One of the two is gone; the counts cannot say which, and the service says so.
    cluster.judged(3, 2)
    assert cluster.devices()["gpu-2"]["presence"] == "unhealthy_or_removed"
    for device_id in ("gpu-1", "gpu-2"):
        device = cluster.device(device_id)
        assert (device["state"], device["presence"]) == ("present", "unhealthy_or_removed")
        assert device["health_detail"].startswith("Unhealthy or removed")
        assert cluster.events("device_removed", device_id) == []
    counted = cluster.events("devices_counted", None)
    assert [e["after"] for e in counted] == [
        {"unhealthy": 1, "removed": 1, "among": ["gpu-1", "gpu-2"]}
    ]
    listed = cluster.client.get(
        "/api/v1/devices",
        params={"node": NODE, "state": "unhealthy_or_removed"},
        headers=cluster.reader,
    ).json()["results"]
    assert sorted(d["device_id"] for d in listed) == ["gpu-1", "gpu-2"]
    detail = cluster.client.get(f"/api/v1/nodes/{NODE}", headers=cluster.reader).json()
    assert detail["undecided_devices"] == [
        {"resource": GPU, "unhealthy": 1, "removed": 1, "among": ["gpu-1", "gpu-2"]}
    ]
    sign_in(cluster.client, cluster.reader["Authorization"][7:])
    pk = cluster.devices()["gpu-2"]["id"]
    for page in (
        f"/devices/{pk}",
        f"/nodes/{NODE}",
        f"/devices?node={NODE}&state=unhealthy_or_removed",
    ):
        response = cluster.client.get(page)
        assert response.status_code == 200
        assert "Unhealthy or removed" in response.text, page
    node_page = cluster.client.get(f"/nodes/{NODE}").text
    assert "1 unhealthy, 1 removed among gpu-1, gpu-2" in node_page

    # Capacity rises again while neither is offered: both are counted unhealthy.
    cluster.judged(4, 2)
    assert cluster.devices()["gpu-2"]["presence"] == "present"
    assert cluster.state_of("gpu-1") == ("present", "Unhealthy")
    assert cluster.events("device_removed", "gpu-2") == []
    assert cluster.events("device_reappeared", "gpu-2") == []


def test_a_flap_while_another_is_unplugged_names_no_device_the_counts_cannot_tell(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _four_healthy_gpus(start_app, fake_api, make_token)
    cluster.derived(FOUR | {"gpu-1": "Unhealthy"})
    cluster.judged(4, 3)

    # gpu-2 is pulled out while gpu-3 flaps: the status lags, then counts one gone. Two left
    # the offer as capacity fell, so the unhealthy gpu-1 may be the one that went as well.
    cluster.derived(FOUR | {"gpu-1": "Unhealthy", "gpu-2": "Unhealthy", "gpu-3": "Unhealthy"})
    cluster.judged(3, 1)
    for device_id in ("gpu-1", "gpu-2", "gpu-3"):
        assert cluster.state_of(device_id) == ("present", "Unhealthy"), device_id
        assert cluster.devices()[device_id]["presence"] == "unhealthy_or_removed", device_id

    # gpu-3 is offered again: it only flapped. Which of gpu-1 and gpu-2 went, the counts
    # cannot say, and the service does not guess.
    cluster.derived(FOUR | {"gpu-1": "Unhealthy", "gpu-2": "Unhealthy"})
    assert cluster.state_of("gpu-3") == ("present", "Healthy")
    cluster.judged(3, 2)
    for device_id in ("gpu-1", "gpu-2"):
        assert cluster.devices()[device_id]["presence"] == "unhealthy_or_removed", device_id
    newest = cluster.events("devices_counted", None)[0]
    assert newest["after"] == {"unhealthy": 1, "removed": 1, "among": ["gpu-1", "gpu-2"]}
    for device_id in FOUR:
        assert cluster.events("device_removed", device_id) == []


def test_a_status_agreeing_with_an_older_list_by_coincidence_names_no_device(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _four_healthy_gpus(start_app, fake_api, make_token)
    cluster.derived(FOUR | {"gpu-1": "Unhealthy"})
    cluster.judged(4, 3)
    assert cluster.state_of("gpu-1") == ("present", "Unhealthy")

    # gpu-1 recovers as gpu-2 is unplugged. The Node's status says so first, and its counts
    # (three devices, all offered) match the agent's older list, which still lacks gpu-1.
    cluster.status(3, 3)
    cluster.synced(3, 3)
    assert cluster.state_of("gpu-1") == ("present", "Unhealthy")
    assert cluster.state_of("gpu-2") == ("present", "Healthy")

    # The agent's list catches up: the two are judged as one moment.
    cluster.derived(FOUR | {"gpu-2": "Unhealthy"})
    assert cluster.state_of("gpu-1") == ("present", "Healthy")
    assert cluster.state_of("gpu-2")[0] == "removed"
    for device_id in ("gpu-0", "gpu-1", "gpu-3"):
        assert cluster.events("device_removed", device_id) == []


def test_an_agent_that_forgot_its_devices_changes_nothing(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _four_healthy_gpus(start_app, fake_api, make_token)
    cluster.derived(FOUR | {"gpu-1": "Unhealthy"})
    cluster.judged(4, 3)
    cluster.derived(FOUR | {"gpu-1": "Unhealthy", "gpu-3": "Unhealthy"})
    cluster.judged(3, 2)
    assert cluster.state_of("gpu-3")[0] == "removed"

    def states() -> dict[str, tuple[str, str, str]]:
        return {d: (s["state"], s["presence"], s["health"]) for d, s in cluster.devices().items()}

    before = states()
    assert before["gpu-1"] == ("present", "present", "Unhealthy")

    # Restarted, the agent lists only what the kubelet shows now: the offered GPUs.
    offered = {d: "Healthy" for d in ("gpu-0", "gpu-2")}
    result = cluster.derived(offered)
    assert result["removed"] == 0 and result["health_changes"] == 0
    assert states() == before
    assert cluster.events("device_removed", "gpu-1") == []
    assert cluster.state_of("gpu-1") == ("present", "Unhealthy")


def test_an_empty_list_from_a_restarted_agent_is_every_device_not_offered(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _four_healthy_gpus(start_app, fake_api, make_token)

    # Every GPU failed while the agent was away: restarted, it knows none of them.
    cluster.derived({})
    cluster.judged(4, 0)
    assert {d: cluster.state_of(d) for d in FOUR} == dict.fromkeys(FOUR, ("present", "Unhealthy"))
    assert all(cluster.devices()[d]["presence"] == "present" for d in FOUR)
    for device_id in FOUR:
        assert cluster.events("device_removed", device_id) == []


def _gpu_1_unhealthy_then_unplugged_as_gpu_2_fails(
    start_app: StartApp, fake_api: FakeApiServer, make_token: Callable[..., str]
) -> Cluster:
    """gpu-1 fails and is judged unhealthy; then, unseen by the service, gpu-1 is unplugged
    and gpu-2 fails, and the Node's status says so."""
    cluster = _four_healthy_gpus(start_app, fake_api, make_token)
    cluster.derived(FOUR | {"gpu-1": "Unhealthy"})
    cluster.judged(4, 3)
    assert cluster.state_of("gpu-1") == ("present", "Unhealthy")
    cluster.status(3, 2)
    cluster.synced(3, 2)
    return cluster


def _neither_named(cluster: Cluster) -> None:
    for device_id in ("gpu-1", "gpu-2"):
        device = cluster.devices()[device_id]
        assert (device["state"], device["presence"]) == ("present", "unhealthy_or_removed")
        assert cluster.events("device_removed", device_id) == []
    detail = cluster.client.get(f"/api/v1/nodes/{NODE}", headers=cluster.reader).json()
    assert detail["undecided_devices"] == [
        {"resource": GPU, "unhealthy": 1, "removed": 1, "among": ["gpu-1", "gpu-2"]}
    ]


def test_a_restarted_agent_names_no_device_the_changes_it_missed_leave_untold(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _gpu_1_unhealthy_then_unplugged_as_gpu_2_fails(start_app, fake_api, make_token)
    # The agent restarted meanwhile: it knows only what the kubelet offers now.
    cluster.boot, cluster.seq = "boot-2", 0
    cluster.derived({"gpu-0": "Healthy", "gpu-3": "Healthy"})
    _neither_named(cluster)


def test_the_first_snapshot_after_a_service_restart_names_no_device_it_cannot_tell(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _gpu_1_unhealthy_then_unplugged_as_gpu_2_fails(start_app, fake_api, make_token)
    # The service restarted meanwhile; the agent sends its latest list, both changes in one.
    cluster.client = start_app()
    cluster.derived(FOUR | {"gpu-1": "Unhealthy", "gpu-2": "Unhealthy"})
    _neither_named(cluster)


def test_a_status_that_catches_up_after_the_watch_broke_names_no_device_it_cannot_tell(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _four_healthy_gpus(start_app, fake_api, make_token)
    cluster.derived(FOUR | {"gpu-1": "Unhealthy"})
    cluster.judged(4, 3)

    # The watch of nodes breaks; meanwhile gpu-1 is unplugged and gpu-2 fails, and the Node's
    # status, when the watch is back, says both at once.
    asked = len(fake_api.recorded("GET", "/api/v1/nodes"))
    fake_api.deny("nodes")
    wait_for(lambda: len(fake_api.recorded("GET", "/api/v1/nodes")) > asked, what="a refused watch")
    cluster.status(3, 2)
    fake_api.allow("nodes")
    cluster.synced(3, 2)
    # The agent's list catches up, in the same service process and the same agent boot.
    cluster.derived(FOUR | {"gpu-1": "Unhealthy", "gpu-2": "Unhealthy"})
    _neither_named(cluster)


def test_a_device_plugged_back_and_failed_while_the_service_was_down_is_back_unhealthy(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _four_healthy_gpus(start_app, fake_api, make_token)
    cluster.derived(FOUR | {"gpu-3": "Unhealthy"})
    cluster.judged(3, 3)
    assert cluster.state_of("gpu-3")[0] == "removed"

    # While the service is down, gpu-3 is plugged in again and fails before it is looked at.
    cluster.client = start_app()
    cluster.status(4, 3)
    cluster.synced(4, 3)
    cluster.derived(FOUR | {"gpu-3": "Unhealthy"})
    assert cluster.state_of("gpu-3") == ("present", "Unhealthy")
    assert cluster.devices()["gpu-3"]["presence"] == "present"
    assert len(cluster.events("device_reappeared", "gpu-3")) == 1


def test_without_node_status_the_device_says_it_may_be_unhealthy_or_removed(
    fake_api: FakeApiServer, start_app: StartApp, make_token: Callable[..., str]
) -> None:
    cluster = _cluster(start_app, fake_api, make_token)
    cluster.derived(FOUR)
    cluster.derived(FOUR | {"gpu-3": "Unhealthy"})

    listed = cluster.devices()["gpu-3"]
    device = cluster.device("gpu-3")
    for answer in (listed, device):
        assert (answer["state"], answer["health"], answer["health_source"]) == (
            "present",
            "Unhealthy",
            "derived",
        )
        assert answer["health_detail"].startswith(NO_STATUS_WORDS)
    assert cluster.devices()["gpu-0"]["health_detail"] is None
    export = cluster.client.get(
        "/api/v1/devices", params={"node": NODE, "format": "csv"}, headers=cluster.reader
    )
    assert NO_STATUS_WORDS in export.text

    sign_in(cluster.client, cluster.reader["Authorization"][7:])
    for page in (f"/devices/{device['id']}", f"/nodes/{NODE}", f"/devices?node={NODE}"):
        response = cluster.client.get(page)
        assert response.status_code == 200
        assert NO_STATUS_WORDS in response.text, page
        assert "Unhealthy or removed" in response.text, page

    # The Node appears in the cluster, one device short: now it is known to be gone ...
    cluster.judged(3, 3)
    assert cluster.state_of("gpu-3")[0] == "removed"
    events_page = cluster.client.get(f"/events?node={NODE}")
    assert "not counted in the Node&#39;s capacity" in events_page.text
    # ... and when the Node leaves the cluster, what its status told stands: no new
    # evidence says otherwise.
    fake_api.delete("nodes", NODE)
    wait_for(
        lambda: (
            GPU
            not in (
                cluster.client.get(f"/api/v1/nodes/{NODE}", headers=cluster.reader).json()[
                    "capacity"
                ]
                or {}
            )
        ),
        what="the Node forgotten",
    )
    assert cluster.state_of("gpu-3")[0] == "removed"
    assert cluster.events("device_reappeared", "gpu-3") == []
