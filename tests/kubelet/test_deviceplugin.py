"""The device plugin server base, over real gRPC on unix sockets."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from devicedeck.kubelet.deviceplugin import (
    HEALTHY,
    UNHEALTHY,
    AllocationError,
    DevicePluginServer,
    PluginDevice,
)
from devicedeck.kubelet.paths import KUBELET_SOCKET_NAME, KubeletPaths, unix_target
from devicedeck.kubelet.proto import deviceplugin_pb2, deviceplugin_pb2_grpc

from .fakes import FakeKubeletRegistration

RESOURCE = "example.com/dongle"


def four_devices_on_two_numa_nodes() -> list[PluginDevice]:
    return [PluginDevice(f"dev-{i}", HEALTHY, (i // 2,)) for i in range(4)]


class EnvPlugin(DevicePluginServer):
    def allocate_container(
        self, device_ids: list[str]
    ) -> deviceplugin_pb2.ContainerAllocateResponse:
        if "dev-3" in device_ids:
            raise AllocationError("dev-3 is reserved")
        response = deviceplugin_pb2.ContainerAllocateResponse(envs={"DEVS": ",".join(device_ids)})
        response.devices.add(container_path="/dev/x", host_path="/dev/x", permissions="rw")
        return response


@pytest.fixture
def plugin(kubelet_root: KubeletPaths) -> Iterator[EnvPlugin]:
    server = EnvPlugin(
        RESOURCE,
        device_plugins_dir=kubelet_root.device_plugins_dir,
        devices=four_devices_on_two_numa_nodes(),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def channel(plugin: EnvPlugin) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(unix_target(plugin.socket_path)) as ch:
        yield ch


def health_of(response: deviceplugin_pb2.ListAndWatchResponse) -> dict[str, str]:
    return {d.ID: d.health for d in response.devices}


def test_registers_with_the_kubelet(
    fake_kubelet: FakeKubeletRegistration, plugin: EnvPlugin
) -> None:
    assert fake_kubelet.wait_for_requests(1)
    request = fake_kubelet.requests[0]
    assert request.version == "v1beta1"
    assert request.endpoint == "example.com-dongle.sock"
    assert request.resource_name == RESOURCE
    assert request.options.get_preferred_allocation_available is True
    assert request.options.pre_start_required is False
    assert plugin.socket_path.is_socket()
    assert plugin.wait_for_registration(1)


def test_options_and_device_list_with_topology(channel: grpc.Channel) -> None:
    stub = deviceplugin_pb2_grpc.DevicePluginStub(channel)
    options = stub.GetDevicePluginOptions(deviceplugin_pb2.Empty(), timeout=5)
    assert options.get_preferred_allocation_available
    stream = stub.ListAndWatch(deviceplugin_pb2.Empty(), timeout=10)
    first = next(stream)
    assert [d.ID for d in first.devices] == ["dev-0", "dev-1", "dev-2", "dev-3"]
    assert [[n.ID for n in d.topology.nodes] for d in first.devices] == [[0], [0], [1], [1]]
    stream.cancel()


def test_every_stream_gets_every_update(plugin: EnvPlugin, channel: grpc.Channel) -> None:
    stub = deviceplugin_pb2_grpc.DevicePluginStub(channel)
    kubelet_stream = stub.ListAndWatch(deviceplugin_pb2.Empty(), timeout=10)
    agent_stream = stub.ListAndWatch(deviceplugin_pb2.Empty(), timeout=10)
    for stream in (kubelet_stream, agent_stream):
        assert set(health_of(next(stream)).values()) == {HEALTHY}
    assert plugin.wait_for_streams(2)

    plugin.set_health("dev-1", UNHEALTHY)
    plugin.remove_device("dev-3")
    plugin.add_device(PluginDevice("dev-9", HEALTHY, (1,)))
    plugin.set_health("dev-1", HEALTHY)
    for stream in (kubelet_stream, agent_stream):
        assert health_of(next(stream))["dev-1"] == UNHEALTHY
        assert "dev-3" not in health_of(next(stream))
        assert "dev-9" in health_of(next(stream))
        assert health_of(next(stream)) == {
            "dev-0": HEALTHY,
            "dev-1": HEALTHY,
            "dev-2": HEALTHY,
            "dev-9": HEALTHY,
        }

    kubelet_stream.cancel()
    assert plugin.wait_for_streams(1)
    plugin.set_devices([PluginDevice("only", UNHEALTHY)])
    assert health_of(next(agent_stream)) == {"only": UNHEALTHY}
    agent_stream.cancel()
    assert plugin.wait_for_streams(0)


def test_stop_ends_open_streams(kubelet_root: KubeletPaths) -> None:
    server = DevicePluginServer(
        RESOURCE, device_plugins_dir=kubelet_root.device_plugins_dir, devices=[PluginDevice("a")]
    )
    server.start()
    with grpc.insecure_channel(unix_target(server.socket_path)) as ch:
        stream = deviceplugin_pb2_grpc.DevicePluginStub(ch).ListAndWatch(
            deviceplugin_pb2.Empty(), timeout=10
        )
        next(stream)
        server.stop()
        # The stream ends cleanly (status OK), which the kubelet reads as the plugin going away.
        assert next(stream, None) is None
        assert stream.code() == grpc.StatusCode.OK
    assert not server.socket_path.exists()


def test_registers_again_when_the_kubelet_restarts(
    kubelet_root: KubeletPaths, fake_kubelet: FakeKubeletRegistration, plugin: EnvPlugin
) -> None:
    assert fake_kubelet.wait_for_requests(1)
    fake_kubelet.stop()
    # A new kubelet removes every socket in the directory, then serves kubelet.sock again.
    plugin.socket_path.unlink()
    restarted = FakeKubeletRegistration(kubelet_root.kubelet_socket)
    restarted.start()
    try:
        assert restarted.wait_for_requests(1)
        assert restarted.requests[0].endpoint == plugin.socket_name
        assert plugin.socket_path.is_socket()
        with grpc.insecure_channel(unix_target(plugin.socket_path)) as ch:
            stream = deviceplugin_pb2_grpc.DevicePluginStub(ch).ListAndWatch(
                deviceplugin_pb2.Empty(), timeout=10
            )
            assert len(next(stream).devices) == 4
            stream.cancel()
    finally:
        restarted.stop()


def test_registers_once_per_kubelet_when_its_socket_creation_is_reported_late(
    kubelet_root: KubeletPaths, fake_kubelet: FakeKubeletRegistration, plugin: EnvPlugin
) -> None:
    """A restarting kubelet deletes the plugin's socket and creates kubelet.sock. When the
    plugin re-serves its socket in between, it finds kubelet.sock already there and registers;
    the report of kubelet.sock's creation comes after. A second registration would make the
    kubelet replace the plugin's endpoint, failing any Allocate in flight on the first."""
    assert plugin.wait_for_registration(1)
    plugin._on_dir_change({KUBELET_SOCKET_NAME}, set())
    assert len(fake_kubelet.requests) == 1
    assert plugin.registration_count == 1
    # A kubelet.sock that is another socket is a new kubelet: register with it.
    fake_kubelet.stop()
    restarted = FakeKubeletRegistration(kubelet_root.kubelet_socket)
    restarted.start()
    try:
        assert plugin.wait_for_registration(2)
        plugin._on_dir_change({KUBELET_SOCKET_NAME}, set())
        assert len(restarted.requests) == 1
        assert plugin.registration_count == 2
    finally:
        restarted.stop()


def test_serves_again_when_its_socket_is_deleted(
    fake_kubelet: FakeKubeletRegistration, plugin: EnvPlugin
) -> None:
    assert fake_kubelet.wait_for_requests(1)
    plugin.socket_path.unlink()
    assert fake_kubelet.wait_for_requests(2)
    assert plugin.socket_path.is_socket()


def test_waits_for_a_kubelet_that_is_not_up_yet(kubelet_root: KubeletPaths) -> None:
    server = DevicePluginServer(RESOURCE, device_plugins_dir=kubelet_root.device_plugins_dir)
    server.start()
    kubelet = FakeKubeletRegistration(kubelet_root.kubelet_socket)
    try:
        assert server.registration_count == 0
        kubelet.start()
        assert kubelet.wait_for_requests(1)
    finally:
        server.stop()
        kubelet.stop()


def test_preferred_allocation_keeps_to_one_numa_node(channel: grpc.Channel) -> None:
    stub = deviceplugin_pb2_grpc.DevicePluginStub(channel)
    request = deviceplugin_pb2.PreferredAllocationRequest()
    request.container_requests.add(
        available_deviceIDs=["dev-0", "dev-2", "dev-3", "dev-1"],
        must_include_deviceIDs=["dev-3"],
        allocation_size=2,
    )
    request.container_requests.add(
        available_deviceIDs=["dev-0", "dev-2", "dev-3"], allocation_size=2
    )
    response = stub.GetPreferredAllocation(request, timeout=5)
    assert list(response.container_responses[0].deviceIDs) == ["dev-3", "dev-2"]
    assert list(response.container_responses[1].deviceIDs) == ["dev-2", "dev-3"]


def test_allocate_uses_the_per_container_hook(channel: grpc.Channel) -> None:
    stub = deviceplugin_pb2_grpc.DevicePluginStub(channel)
    request = deviceplugin_pb2.AllocateRequest()
    request.container_requests.add(devices_ids=["dev-0", "dev-1"])
    request.container_requests.add(devices_ids=["dev-2"])
    response = stub.Allocate(request, timeout=5)
    assert [dict(c.envs) for c in response.container_responses] == [
        {"DEVS": "dev-0,dev-1"},
        {"DEVS": "dev-2"},
    ]
    assert response.container_responses[0].devices[0].permissions == "rw"

    unknown = deviceplugin_pb2.AllocateRequest()
    unknown.container_requests.add(devices_ids=["nope"])
    with pytest.raises(grpc.RpcError) as excinfo:
        stub.Allocate(unknown, timeout=5)
    assert excinfo.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    refused = deviceplugin_pb2.AllocateRequest()
    refused.container_requests.add(devices_ids=["dev-3"])
    with pytest.raises(grpc.RpcError) as excinfo:
        stub.Allocate(refused, timeout=5)
    assert excinfo.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "reserved" in (excinfo.value.details() or "")

    assert (
        stub.PreStartContainer(
            deviceplugin_pb2.PreStartContainerRequest(devices_ids=["dev-0"]), timeout=5
        )
        == deviceplugin_pb2.PreStartContainerResponse()
    )


def test_rejects_bad_names(kubelet_root: KubeletPaths) -> None:
    with pytest.raises(ValueError, match="resource name"):
        DevicePluginServer("dongle", device_plugins_dir=kubelet_root.device_plugins_dir)
    with pytest.raises(ValueError, match="listed twice"):
        DevicePluginServer(
            RESOURCE,
            device_plugins_dir=kubelet_root.device_plugins_dir,
            devices=[PluginDevice("a"), PluginDevice("a")],
        )
    server = DevicePluginServer(RESOURCE, device_plugins_dir=kubelet_root.device_plugins_dir)
    with pytest.raises(KeyError, match="unknown device"):
        server.set_health("missing", UNHEALTHY)
