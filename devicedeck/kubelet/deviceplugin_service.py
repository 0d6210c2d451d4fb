"""The gRPC side of a device plugin: the DevicePlugin servicer and the ListAndWatch fan-out.

StreamHub gives every open ListAndWatch stream its own queue and puts the full device
list on each of them for every change. Plugins that share one channel between streams
deliver each change to only one of them, so a second client (say a monitoring agent)
silently takes updates away from the kubelet.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import grpc

from devicedeck.kubelet.proto import deviceplugin_pb2, deviceplugin_pb2_grpc

log = logging.getLogger(__name__)

_END_OF_STREAM = object()


class AllocationError(Exception):
    """Raised by allocate_container to refuse an allocation; the kubelet sees the message."""


class StreamHub:
    """The current device list and the queues of the streams that want every change."""

    def __init__(self, snapshot: deviceplugin_pb2.ListAndWatchResponse) -> None:
        self._changed = threading.Condition()
        self._latest = snapshot
        self._queues: set[queue.SimpleQueue[Any]] = set()
        self._closed = False

    def publish(self, snapshot: deviceplugin_pb2.ListAndWatchResponse) -> None:
        with self._changed:
            self._latest = snapshot
            for updates in self._queues:
                updates.put(snapshot)

    def end_streams(self) -> None:
        """End every open stream; streams opened later work normally."""
        with self._changed:
            for updates in self._queues:
                updates.put(_END_OF_STREAM)

    def close(self) -> None:
        """End every open stream and refuse new ones (the plugin is stopping)."""
        with self._changed:
            self._closed = True
        self.end_streams()

    @property
    def count(self) -> int:
        with self._changed:
            return len(self._queues)

    def wait_for_count(self, count: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self._queues) == count, timeout)

    def _leave(self, updates: queue.SimpleQueue[Any]) -> None:
        with self._changed:
            self._queues.discard(updates)
            self._changed.notify_all()

    def stream(
        self, context: grpc.ServicerContext
    ) -> Iterator[deviceplugin_pb2.ListAndWatchResponse]:
        updates: queue.SimpleQueue[Any] = queue.SimpleQueue()
        with self._changed:
            if self._closed:
                return
            # Reading the list and joining under one lock: no change is lost or sent
            # twice between the first message and the updates.
            first = self._latest
            self._queues.add(updates)
            self._changed.notify_all()
        # add_callback is False when the RPC has already ended (the server is stopping);
        # nothing would ever wake the loop below then.
        if not context.add_callback(lambda: updates.put(_END_OF_STREAM)):
            self._leave(updates)
            return
        try:
            yield first
            while True:
                item = updates.get()
                if item is _END_OF_STREAM:
                    return
                yield item
        finally:
            self._leave(updates)


class PluginHooks(Protocol):
    """What the servicer needs from the plugin object."""

    resource_name: str
    options: deviceplugin_pb2.DevicePluginOptions
    streams: StreamHub

    def unknown_devices(self, device_ids: Sequence[str]) -> list[str]: ...

    def preferred_devices(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]: ...

    def allocate_container(
        self, device_ids: list[str]
    ) -> deviceplugin_pb2.ContainerAllocateResponse: ...

    def pre_start_container(self, device_ids: list[str]) -> None: ...


class DevicePluginServicer(deviceplugin_pb2_grpc.DevicePluginServicer):
    """Translates the five DevicePlugin RPCs into calls on the plugin object."""

    def __init__(self, plugin: PluginHooks) -> None:
        self._plugin = plugin

    def GetDevicePluginOptions(
        self, request: deviceplugin_pb2.Empty, context: grpc.ServicerContext
    ) -> deviceplugin_pb2.DevicePluginOptions:
        return self._plugin.options

    def ListAndWatch(
        self, request: deviceplugin_pb2.Empty, context: grpc.ServicerContext
    ) -> Iterator[deviceplugin_pb2.ListAndWatchResponse]:
        return self._plugin.streams.stream(context)

    def GetPreferredAllocation(
        self, request: deviceplugin_pb2.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> deviceplugin_pb2.PreferredAllocationResponse:
        response = deviceplugin_pb2.PreferredAllocationResponse()
        for req in request.container_requests:
            chosen = self._plugin.preferred_devices(
                list(req.available_deviceIDs),
                list(req.must_include_deviceIDs),
                req.allocation_size,
            )
            response.container_responses.add(deviceIDs=chosen)
        return response

    def Allocate(
        self, request: deviceplugin_pb2.AllocateRequest, context: grpc.ServicerContext
    ) -> deviceplugin_pb2.AllocateResponse:
        response = deviceplugin_pb2.AllocateResponse()
        for req in request.container_requests:
            device_ids = list(req.devices_ids)
            unknown = self._plugin.unknown_devices(device_ids)
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown devices: {unknown}")
            try:
                container = self._plugin.allocate_container(device_ids)
            except AllocationError as e:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
            response.container_responses.append(container)
            log.info(
                "allocated",
                extra={
                    "event": "allocated",
                    "resource": self._plugin.resource_name,
                    "devices": ",".join(device_ids),
                },
            )
        return response

    def PreStartContainer(
        self, request: deviceplugin_pb2.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> deviceplugin_pb2.PreStartContainerResponse:
        self._plugin.pre_start_container(list(request.devices_ids))
        return deviceplugin_pb2.PreStartContainerResponse()
