"""Fakes of the agent's other sides, on real sockets: a PodResources server that rate limits,
a device plugin that passes a real plugin's stream on after a delay, and an HTTP service that
misbehaves on demand and can turn into a proxy to the real service."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import httpx

from devicedeck.kubelet.paths import KubeletPaths, unix_target
from devicedeck.kubelet.proto import deviceplugin_pb2 as dp
from devicedeck.kubelet.proto import deviceplugin_pb2_grpc as dp_grpc
from devicedeck.kubelet.proto import podresources_pb2 as pr
from devicedeck.kubelet.proto import podresources_pb2_grpc as pr_grpc

FAKE_RESOURCE = "fake.example.com/dev"


@dataclass(frozen=True)
class Call:
    at: float
    method: str
    refused: bool


class UnixGrpcServer:
    """One servicer served on a unix socket, with the threads it runs on."""

    def __init__(self) -> None:
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None

    def start(
        self, add_servicer: Callable[[Any, grpc.Server], None], servicer: Any, path: Path
    ) -> None:
        self._executor = ThreadPoolExecutor(max_workers=4)
        self._server = grpc.server(self._executor)
        add_servicer(servicer, self._server)
        self._server.add_insecure_port(unix_target(path))
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


class RateLimitedPodResources(pr_grpc.PodResourcesListerServicer):
    """Answers RESOURCE_EXHAUSTED for `exhausted_for` seconds after the first call, then
    serves one pod holding d0 of two allocatable devices."""

    def __init__(self, root: Path, exhausted_for: float) -> None:
        self.paths = KubeletPaths(root)
        self.exhausted_for = exhausted_for
        self.calls: list[Call] = []
        self.first_call: float | None = None
        self._lock = threading.Lock()
        self._server = UnixGrpcServer()

    def start(self) -> None:
        self.paths.make_dirs()
        self._server.start(
            pr_grpc.add_PodResourcesListerServicer_to_server, self, self.paths.pod_resources_socket
        )

    def stop(self) -> None:
        self._server.stop()

    def _admit(self, method: str, context: grpc.ServicerContext) -> None:
        now = time.monotonic()
        with self._lock:
            if self.first_call is None:
                self.first_call = now
            refused = now < self.first_call + self.exhausted_for
            self.calls.append(Call(now, method, refused))
        if refused:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")

    def List(
        self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        self._admit("List", context)
        device = pr.ContainerDevices(
            resource_name=FAKE_RESOURCE,
            device_ids=["d0"],
            topology=pr.TopologyInfo(nodes=[pr.NUMANode(ID=0)]),
        )
        container = pr.ContainerResources(name="main", devices=[device])
        return pr.ListPodResourcesResponse(
            pod_resources=[pr.PodResources(name="limited", namespace="ml", containers=[container])]
        )

    def GetAllocatableResources(
        self, request: pr.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        self._admit("GetAllocatableResources", context)
        return pr.AllocatableResourcesResponse(
            devices=[
                pr.ContainerDevices(resource_name=FAKE_RESOURCE, device_ids=[device])
                for device in ("d0", "d1")
            ]
        )


class SlowDevicePlugin(dp_grpc.DevicePluginServicer):
    """A device plugin socket that forwards a real plugin's ListAndWatch stream, holding back
    each stream's first message for `first_message_delay` seconds: a plugin slow to answer
    a new stream, as when its health checks run before the first list."""

    def __init__(self, path: Path, upstream: Path, first_message_delay: float) -> None:
        self.path = path
        self.first_message_delay = first_message_delay
        self._upstream = grpc.insecure_channel(unix_target(upstream))
        self._stub = dp_grpc.DevicePluginStub(self._upstream)
        self._server = UnixGrpcServer()

    def start(self) -> None:
        self._server.start(dp_grpc.add_DevicePluginServicer_to_server, self, self.path)

    def stop(self) -> None:
        self._server.stop()
        self._upstream.close()

    def GetDevicePluginOptions(
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> dp.DevicePluginOptions:
        return self._stub.GetDevicePluginOptions(dp.Empty(), timeout=5)

    def ListAndWatch(
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> Iterator[dp.ListAndWatchResponse]:
        call = self._stub.ListAndWatch(dp.Empty())
        context.add_callback(call.cancel)
        first = True
        try:
            for response in call:
                if first:
                    time.sleep(self.first_message_delay)
                    first = False
                yield response
        except grpc.RpcError:
            return


MODES = ("500", "409", "401", "garbage", "reset", "proxy")


class MisbehavingService:
    """An HTTP server answering ingest posts according to `mode`; in "proxy" mode it passes
    requests to the real service. Records each post's mode and source."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.mode = "500"
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._http = httpx.Client(base_url=upstream, timeout=10)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def count(self, mode: str) -> int:
        with self._lock:
            return sum(1 for m, _ in self.posts if m == mode)

    def sources(self) -> list[dict[str, Any]]:
        with self._lock:
            return [body.get("source", {}) for _, body in self.posts]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._http.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                mode = fake.mode
                with fake._lock:
                    fake.posts.append((mode, json.loads(raw)))
                if mode == "proxy":
                    headers = {"Authorization": self.headers.get("Authorization", "")}
                    upstream = fake._http.post(
                        self.path,
                        content=raw,
                        headers={**headers, "Content-Type": "application/json"},
                    )
                    self._reply(upstream.status_code, upstream.content)
                elif mode == "reset":
                    # SO_LINGER 0: closing sends RST, the client sees a connection reset.
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.close_connection = True
                elif mode == "garbage":
                    self._reply(200, b"<html>definitely not the ingest result", "text/html")
                else:
                    code = int(mode)
                    error = {"error": {"code": "fake", "message": f"fake {code}", "details": []}}
                    self._reply(code, json.dumps(error).encode())

            def _reply(
                self, status: int, body: bytes, content_type: str = "application/json"
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
