"""The agent through faults: service outage, kubelet restart, rate limiting, bad answers and
a rotated token. Real processes, real sockets, real HTTP."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import RunningService, start_service
from .fakes import FAKE_RESOURCE, MisbehavingService, RateLimitedPodResources
from .helpers import DONGLE, GPU, Api, Process, SimNode, counts, wait_until

pytestmark = pytest.mark.slow

PLUGINS = [f"{GPU}:4:gpu", f"{DONGLE}:2"]
OUTAGE_SECONDS = 10.0


def event_key(event: dict[str, object]) -> tuple[object, ...]:
    return tuple(event.get(k) for k in ("kind", "resource", "device_id", "namespace", "pod"))


def test_service_outage_catches_up_without_losing_or_repeating(
    work_dir: Path,
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
) -> None:
    running = start_service(f"sqlite:///{work_dir / 'outage.db'}", work_dir)
    try:
        node = sim_node(PLUGINS)
        leaving = node.create_pod("ml", "leaving", {GPU: 1})
        api = api_for(running)
        start_agent(
            running.url,
            running.ingest_token,
            node.root,
            *("--interval", "1", "--heartbeat", "2", "--max-backoff", "2"),
        )
        wait_until(lambda: counts(api, node_name) == (6, 1), message="first state")
        before = api.events(node_name)

        running.service.stop()
        down = time.monotonic()
        node.delete_pod("ml", "leaving")
        arriving = node.create_pod("ml", "arriving", {GPU: 2, DONGLE: 1})
        held = arriving["containers"][0]["devices"]
        held_gpus = held[GPU]["device_ids"]
        sick = next(d for d in node.device_ids(GPU) if d not in held_gpus)
        node.set_health(GPU, sick, "Unhealthy")
        # The outage itself is the scenario: the service stays down for its whole length
        # while the agent keeps failing and retrying.
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down)))
        running.service.start()

        wanted = {(GPU, d): ("ml", "arriving", arriving["uid"]) for d in held_gpus}
        wanted[(DONGLE, held[DONGLE]["device_ids"][0])] = ("ml", "arriving", arriving["uid"])

        def caught_up() -> bool:
            devices = api.devices(node_name)
            sick_now = devices.get((GPU, sick), {})
            return api.allocations(node_name) == wanted and sick_now.get("health") == "Unhealthy"

        wait_until(caught_up, message="the final state after the outage")
        after = api.events(node_name)
        new = Counter(event_key(e) for e in after[: len(after) - len(before)])
        leaving_gpu = leaving["containers"][0]["devices"][GPU]["device_ids"][0]
        assert new == Counter(
            [("released", GPU, leaving_gpu, "ml", "leaving")]
            + [("allocated", r, d, "ml", "arriving") for r, d in wanted]
            + [("health_changed", GPU, sick, None, None)]
        )

        # Heartbeats every 2 s and the re-send after the outage change nothing more.
        seen = api.get(f"/api/v1/nodes/{node_name}")["last_seen"]
        wait_until(
            lambda: api.get(f"/api/v1/nodes/{node_name}")["last_seen"] > seen,
            message="a heartbeat",
        )
        assert api.events(node_name) == after
    finally:
        running.service.stop()


def test_kubelet_restart_is_followed_without_restarting_the_agent(
    shared_service: RunningService,
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
) -> None:
    node = sim_node(PLUGINS)
    api = api_for(shared_service)
    agent = start_agent(
        shared_service.url,
        shared_service.ingest_token,
        node.root,
        *("--tap", DONGLE, "--interval", "2", "--max-backoff", "2"),
    )
    wait_until(lambda: counts(api, node_name) == (6, 0), message="first state")

    node.stop()
    node.start()  # a new kubelet: every socket under device-plugins/ and pod-resources/ is new
    pod = node.create_pod("ml", "after-restart", {GPU: 1, DONGLE: 1})
    wait_until(
        lambda: {p for _, p, _ in api.allocations(node_name).values()} == {"after-restart"},
        message="a pod created after the restart",
    )
    assert {uid for _, _, uid in api.allocations(node_name).values()} == {pod["uid"]}
    # The untapped GPUs' health is derived: the restarted kubelet offered none of them until
    # their plugin registered again, which the agent did not report as every GPU failing.
    gpu_changes = [
        e["kind"]
        for e in api.events(node_name)
        if e["kind"] in ("health_changed", "device_removed") and e["resource"] == GPU
    ]
    assert gpu_changes == []
    # The tap found the plugin's new socket: its health changes arrive again. Until the tap
    # is back the agent derives the resource's health from the kubelet, which also sees the
    # device go Unhealthy, so only the plugin as the source shows that the tap delivered it.
    node.set_health(DONGLE, "dongle-1", "Unhealthy")

    def tapped_unhealthy() -> bool:
        device = api.devices(node_name).get((DONGLE, "dongle-1"), {})
        return device.get("health") == "Unhealthy" and device.get("health_source") == "plugin"

    wait_until(tapped_unhealthy, message="a tapped health change after the restart")
    assert agent.alive()


def test_rate_limited_kubelet_is_backed_off_and_still_converges(
    shared_service: RunningService,
    work_dir: Path,
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
) -> None:
    kubelet = RateLimitedPodResources(work_dir / "kubelet", exhausted_for=4.0)
    kubelet.start()
    try:
        api = api_for(shared_service)
        agent = start_agent(
            shared_service.url,
            shared_service.ingest_token,
            kubelet.paths.root,
            *("--interval", "1", "--max-backoff", "2"),
        )
        wait_until(lambda: counts(api, node_name) == (2, 1), message="convergence")
        devices = api.devices(node_name)
        assert devices[(FAKE_RESOURCE, "d0")]["allocation"]["pod"] == "limited"
        assert {d["health"] for d in devices.values()} == {"Healthy"}
        assert agent.alive()
    finally:
        kubelet.stop()
    calls = kubelet.calls
    assert any(c.refused for c in calls)
    gaps = [b.at - a.at for a, b in itertools.pairwise(calls)]
    # Never more than one call a second, even while being refused.
    assert min(gaps) > 0.9, gaps


def test_bad_answers_from_the_service_do_not_stop_the_agent(
    shared_service: RunningService,
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
) -> None:
    fake = MisbehavingService(shared_service.url)
    fake.start()
    try:
        node = sim_node(PLUGINS)
        node.create_pod("ml", "steady", {GPU: 1})
        agent = start_agent(
            fake.url,
            shared_service.ingest_token,
            node.root,
            *("--interval", "1", "--max-backoff", "0.5", "--auth-retry", "0.5"),
        )
        for mode in ("500", "garbage", "reset", "401", "409"):
            fake.mode = mode
            wait_until(lambda m=mode: fake.count(m) >= 3, message=f"answers {mode}")
            assert agent.alive(), agent.output()
        fake.mode = "proxy"
        api = api_for(shared_service)
        wait_until(lambda: counts(api, node_name) == (6, 1), message="recovery")
    finally:
        fake.stop()
    # A 409 starts a new sequence: the next post has a fresh boot_id and seq 1.
    sources = fake.sources()
    first_stale = next(i for i, (mode, _) in enumerate(fake.posts) if mode == "409")
    assert sources[first_stale + 1]["seq"] == 1
    assert sources[first_stale + 1]["boot_id"] != sources[first_stale]["boot_id"]
    log = agent.output()
    assert "event=unauthorized status=401" in log and "event=stale_sequence" in log


def test_token_file_rotation_is_picked_up(
    shared_service: RunningService,
    work_dir: Path,
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
) -> None:
    node = sim_node(PLUGINS)
    token_file = work_dir / "rotating-token"
    token_file.write_text("dd_not-a-valid-token\n")
    # A long auth retry: only noticing the new token file can make the agent try again soon.
    agent = start_agent(
        shared_service.url,
        "",
        node.root,
        *("--auth-retry", "600", "--interval", "2"),
        token_file=token_file,
    )
    wait_until(lambda: "event=unauthorized status=401" in agent.output(), message="a 401")
    replacement = work_dir / "rotating-token.new"
    replacement.write_text(shared_service.ingest_token + "\n")
    replacement.rename(token_file)  # atomically, as the kubelet swaps projected tokens
    api = api_for(shared_service)
    # Within the wait's deadline, far below the 600 s auth retry: the file change woke it.
    wait_until(lambda: counts(api, node_name) == (6, 0), message="data with new token")
