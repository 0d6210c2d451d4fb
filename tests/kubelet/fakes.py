"""Fakes of the kubelet's side of the protocols, serving on real unix sockets."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from devicedeck.kubelet.paths import unix_target
from devicedeck.kubelet.proto import deviceplugin_pb2, deviceplugin_pb2_grpc


class FakeKubeletRegistration(deviceplugin_pb2_grpc.RegistrationServicer):
    """The kubelet's side of Registration, recording each RegisterRequest."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.requests: list[deviceplugin_pb2.RegisterRequest] = []
        self._changed = threading.Condition()
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None

    def Register(
        self, request: deviceplugin_pb2.RegisterRequest, context: grpc.ServicerContext
    ) -> deviceplugin_pb2.Empty:
        with self._changed:
            self.requests.append(request)
            self._changed.notify_all()
        return deviceplugin_pb2.Empty()

    def wait_for_requests(self, count: int, timeout: float = 60.0) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self.requests) >= count, timeout)

    def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=4)
        self._server = grpc.server(self._executor)
        deviceplugin_pb2_grpc.add_RegistrationServicer_to_server(self, self._server)
        self._server.add_insecure_port(unix_target(self.socket_path))
        self._server.start()

    def stop(self, remove_socket: bool = True) -> None:
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if remove_socket:
            self.socket_path.unlink(missing_ok=True)
