"""The kubelet's side of one registered device plugin: a gRPC client on the plugin socket.

Like the kubelet, it dials the plugin (blocking, 10 s, authority "localhost"), asks for the
plugin's options, then keeps exactly one ListAndWatch stream open in a thread. Every message
and the end of the stream are reported to a listener (the device manager). The kubelet never
re-dials a stream that ended: the plugin has to register again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import grpc

from devicedeck.kubelet.proto import deviceplugin_pb2 as dp
from devicedeck.kubelet.proto import deviceplugin_pb2_grpc as dp_grpc

log = logging.getLogger(__name__)

DIAL_TIMEOUT_SECONDS = 10.0
RPC_TIMEOUT_SECONDS = 10.0
# The kubelet's KubeletPreStartContainerRPCTimeoutInSecs.
PRE_START_TIMEOUT_SECONDS = 30.0


class EndpointError(RuntimeError):
    """The plugin could not be reached or answered an RPC with an error."""


class EndpointListener(Protocol):
    def devices_updated(self, endpoint: PluginEndpoint, devices: Sequence[dp.Device]) -> None: ...

    def endpoint_stopped(self, endpoint: PluginEndpoint) -> None: ...


class PluginEndpoint:
    """A connection to one plugin for one resource name."""

    def __init__(
        self, resource: str, socket_path: Path, dial_timeout: float = DIAL_TIMEOUT_SECONDS
    ):
        self.resource = resource
        self.socket_path = socket_path
        self._dial_timeout = dial_timeout
        self._channel: grpc.Channel | None = None
        self._stub: dp_grpc.DevicePluginStub | None = None
        self.options = dp.DevicePluginOptions()
        self._lock = threading.Lock()
        self._call: grpc.Future | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"PluginEndpoint(resource={self.resource!r}, socket={str(self.socket_path)!r})"

    def connect(self) -> None:
        """Dial the plugin and fetch its options; raises EndpointError (channel closed)."""
        channel = grpc.insecure_channel(
            f"unix:{self.socket_path}", options=[("grpc.default_authority", "localhost")]
        )
        try:
            grpc.channel_ready_future(channel).result(timeout=self._dial_timeout)
            stub = dp_grpc.DevicePluginStub(channel)
            self.options = stub.GetDevicePluginOptions(dp.Empty(), timeout=RPC_TIMEOUT_SECONDS)
        except grpc.FutureTimeoutError as e:
            channel.close()
            raise EndpointError(
                f"cannot dial device plugin socket {self.socket_path} "
                f"within {self._dial_timeout:g}s"
            ) from e
        except grpc.RpcError as e:
            channel.close()
            raise EndpointError(f"GetDevicePluginOptions failed: {_describe(e)}") from e
        self._channel = channel
        self._stub = stub

    def start(self, listener: EndpointListener) -> None:
        """Open the single ListAndWatch stream in a background thread."""
        thread = threading.Thread(
            target=self._watch,
            args=(listener,),
            name=f"list-and-watch {self.resource}",
            daemon=True,
        )
        self._thread = thread
        thread.start()

    def stop(self) -> None:
        """Cancel the stream, close the channel and wait for the stream thread."""
        with self._lock:
            self._stopping = True
            call = self._call
        if call is not None:
            call.cancel()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=DIAL_TIMEOUT_SECONDS)
        if self._channel is not None:
            self._channel.close()

    @property
    def stopped(self) -> bool:
        with self._lock:
            return self._stopping

    def _watch(self, listener: EndpointListener) -> None:
        assert self._stub is not None, "connect() before start()"
        try:
            call = self._stub.ListAndWatch(dp.Empty())
            with self._lock:
                self._call = call
                stopping = self._stopping
            if stopping:
                call.cancel()
            for response in call:
                listener.devices_updated(self, list(response.devices))
            log.info("list-and-watch ended", extra={"resource": self.resource, "reason": "eof"})
        except grpc.RpcError as e:
            if not self.stopped:
                log.info(
                    "list-and-watch ended",
                    extra={"resource": self.resource, "reason": _describe(e)},
                )
        finally:
            with self._lock:
                self._stopping = True
            listener.endpoint_stopped(self)

    def _require_stub(self) -> dp_grpc.DevicePluginStub:
        if self._stub is None or self.stopped:
            raise EndpointError(f"device plugin for {self.resource} is not connected")
        return self._stub

    def preferred_allocation(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        request = dp.PreferredAllocationRequest(
            container_requests=[
                dp.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        try:
            response = self._require_stub().GetPreferredAllocation(
                request, timeout=RPC_TIMEOUT_SECONDS
            )
        except grpc.RpcError as e:
            raise EndpointError(f"GetPreferredAllocation failed: {_describe(e)}") from e
        if len(response.container_responses) != 1:
            raise EndpointError(
                "GetPreferredAllocation answered "
                f"{len(response.container_responses)} container responses for 1 request"
            )
        return list(response.container_responses[0].deviceIDs)

    def allocate(self, device_ids: Sequence[str]) -> dp.ContainerAllocateResponse:
        """One container per Allocate call, as the kubelet does."""
        request = dp.AllocateRequest(
            container_requests=[dp.ContainerAllocateRequest(devices_ids=list(device_ids))]
        )
        try:
            response = self._require_stub().Allocate(request, timeout=RPC_TIMEOUT_SECONDS)
        except grpc.RpcError as e:
            raise EndpointError(f"Allocate failed: {_describe(e)}") from e
        if len(response.container_responses) != 1:
            raise EndpointError(
                f"Allocate answered {len(response.container_responses)} container responses "
                "for 1 container request"
            )
        return response.container_responses[0]

    def pre_start_container(self, device_ids: Sequence[str]) -> None:
        request = dp.PreStartContainerRequest(devices_ids=list(device_ids))
        try:
            self._require_stub().PreStartContainer(request, timeout=PRE_START_TIMEOUT_SECONDS)
        except grpc.RpcError as e:
            raise EndpointError(f"PreStartContainer failed: {_describe(e)}") from e


def _describe(error: grpc.RpcError) -> str:
    code = error.code() if isinstance(error, grpc.Call) else None
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    name = code.name if code is not None else "UNKNOWN"
    return f"{name}: {details}"
