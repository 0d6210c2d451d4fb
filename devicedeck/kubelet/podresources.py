"""Client for the kubelet PodResources v1 API on pod-resources/kubelet.sock.

Settings follow what the kubelet's own tooling uses: a 10 s dial timeout and a 16 MiB
receive limit (gRPC's default of 4 MiB is too small for busy nodes). The service is
stateless, so a client may be created per poll; keep one open to save the dial.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from devicedeck.kubelet.paths import unix_target
from devicedeck.kubelet.proto import podresources_pb2, podresources_pb2_grpc

log = logging.getLogger(__name__)

MAX_RECEIVE_BYTES = 16 * 1024 * 1024
DIAL_TIMEOUT_SECONDS = 10.0
CALL_TIMEOUT_SECONDS = 10.0


class PodResourcesError(Exception):
    """The PodResources API could not be reached or refused a call."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class PodResourcesClient:
    """A connection to one kubelet's PodResources socket; use as a context manager."""

    def __init__(
        self,
        socket_path: Path | str,
        *,
        dial_timeout: float = DIAL_TIMEOUT_SECONDS,
        call_timeout: float = CALL_TIMEOUT_SECONDS,
        max_receive_bytes: int = MAX_RECEIVE_BYTES,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.dial_timeout = dial_timeout
        self.call_timeout = call_timeout
        self._channel = grpc.insecure_channel(
            unix_target(self.socket_path),
            options=[("grpc.max_receive_message_length", max_receive_bytes)],
        )
        self._stub = podresources_pb2_grpc.PodResourcesListerStub(self._channel)
        self._ready = False

    def __enter__(self) -> PodResourcesClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def wait_ready(self) -> None:
        """Block until the socket accepts a connection, or raise after the dial timeout."""
        if self._ready:
            return
        future = grpc.channel_ready_future(self._channel)
        try:
            future.result(timeout=self.dial_timeout)
        except grpc.FutureTimeoutError as e:
            future.cancel()
            raise PodResourcesError(
                f"cannot connect to {self.socket_path} within {self.dial_timeout:g}s",
                grpc.StatusCode.UNAVAILABLE,
            ) from e
        self._ready = True

    def _call(self, rpc: str, method: Any, request: Message) -> Any:
        self.wait_ready()
        try:
            return method(request, timeout=self.call_timeout)
        except grpc.RpcError as e:
            code = e.code() if isinstance(e, grpc.Call) else None
            details = e.details() if isinstance(e, grpc.Call) else str(e)
            log.debug(
                "podresources error",
                extra={"event": "podresources_error", "rpc": rpc, "code": code, "details": details},
            )
            name = code.name if code is not None else "UNKNOWN"
            raise PodResourcesError(f"{rpc} failed: {name}: {details}", code) from e

    def list_pod_resources(self) -> podresources_pb2.ListPodResourcesResponse:
        """Devices, CPUs, memory and DRA claims of every active pod's containers."""
        response: podresources_pb2.ListPodResourcesResponse = self._call(
            "List", self._stub.List, podresources_pb2.ListPodResourcesRequest()
        )
        return response

    def get_allocatable_resources(self) -> podresources_pb2.AllocatableResourcesResponse:
        """What the node can hand out: healthy devices only, plus CPUs and memory."""
        response: podresources_pb2.AllocatableResourcesResponse = self._call(
            "GetAllocatableResources",
            self._stub.GetAllocatableResources,
            podresources_pb2.AllocatableResourcesRequest(),
        )
        return response

    def get_pod_resources(
        self, namespace: str, name: str
    ) -> podresources_pb2.GetPodResourcesResponse:
        """One pod's resources. Behind a feature gate (beta from 1.34): older kubelets
        answer UNIMPLEMENTED or an error, which surfaces as PodResourcesError."""
        response: podresources_pb2.GetPodResourcesResponse = self._call(
            "Get",
            self._stub.Get,
            podresources_pb2.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace),
        )
        return response


def to_json(message: Message, *, include_defaults: bool = False) -> dict[str, Any]:
    """A message as proto3 JSON, the way grpcurl prints it: camelCase names
    (podResources, deviceIds, resourceName), `ID` kept as is, 64-bit integers as strings
    and, unless include_defaults, zero values left out (NUMA node 0 prints as `{}`)."""
    result: dict[str, Any] = MessageToDict(
        message,
        preserving_proto_field_name=False,
        always_print_fields_with_no_presence=include_defaults,
    )
    return result


def list_response_to_json(
    response: podresources_pb2.ListPodResourcesResponse, *, include_defaults: bool = False
) -> dict[str, Any]:
    return to_json(response, include_defaults=include_defaults)


def allocatable_response_to_json(
    response: podresources_pb2.AllocatableResourcesResponse, *, include_defaults: bool = False
) -> dict[str, Any]:
    return to_json(response, include_defaults=include_defaults)


def get_response_to_json(
    response: podresources_pb2.GetPodResourcesResponse, *, include_defaults: bool = False
) -> dict[str, Any]:
    return to_json(response, include_defaults=include_defaults)
