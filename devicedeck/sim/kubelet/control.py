"""The simulated kubelet's local control interface: JSON lines over a unix socket.

Socket: ``<root>/devicedeck-sim/control.sock`` (outside the kubelet's own directories).
A client connects, sends ONE request as a JSON object followed by a newline, reads ONE
response line, and the server closes the connection. Requests carry an ``op`` and its
arguments; responses are ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``.

Operations (arguments):

- ``pod.create`` (namespace, name, containers: [{name, requests: {RESOURCE: COUNT}}])
  -> the admitted pod with its devices; a refused pod gives the admission reason.
- ``pod.delete`` (namespace, name) -> the deleted pod.
- ``pod.list`` () -> {"pods": [...]} (active pods, with devices per container/resource).
- ``node.status`` () -> {"resources": {RESOURCE: {capacity, allocatable, devices: [...]}}}.
- ``plugin.status`` () -> {"plugins": {RESOURCE: {"devices": [{id, health}]}}}: what each
  plugin running in the same process (sim-node) itself has now, whatever the kubelet has
  heard of it yet.
- ``device.health`` (resource, device_id, health: "Healthy"|"Unhealthy"),
  ``device.unplug`` / ``device.plug`` (resource, device_id) -> forwarded to the plugin when
  it runs in the same process (sim-node); otherwise refused, saying the plugin is not
  reachable from the kubelet.

Example: ``printf '{"op":"pod.list"}\\n' | socat - UNIX-CONNECT:ROOT/devicedeck-sim/control.sock``
"""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

CONTROL_DIR_NAME = "devicedeck-sim"
CONTROL_SOCKET_NAME = "control.sock"
MAX_REQUEST_BYTES = 1024 * 1024
# Pod creation may wait on a plugin's Allocate (10 s) and PreStartContainer (30 s).
CLIENT_TIMEOUT_SECONDS = 60.0
SERVER_READ_TIMEOUT_SECONDS = 10.0


def control_socket_path(root: Path | str) -> Path:
    return Path(root) / CONTROL_DIR_NAME / CONTROL_SOCKET_NAME


class ControlError(Exception):
    """A refused control request; the message goes back to the client as the reason."""


class ControlUnavailable(ControlError):
    """No simulated kubelet answers on the control socket."""


class DeviceController(Protocol):
    """What the kubelet may ask of a device plugin running in its own process."""

    def set_health(self, device_id: str, health: str) -> None: ...

    def unplug(self, device_id: str) -> None: ...

    def plug(self, device_id: str) -> None: ...

    def devices(self) -> list[tuple[str, str]]:
        """(device id, health) of every device the plugin lists now."""
        ...


Dispatch = Callable[[dict[str, Any]], Any]


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        self.request.settimeout(SERVER_READ_TIMEOUT_SECONDS)
        try:
            line = self.rfile.readline(MAX_REQUEST_BYTES + 1)
        except OSError as e:
            log.warning("control request unreadable", extra={"error": e})
            return
        response = self._answer(line)
        try:
            self.wfile.write(json.dumps(response, sort_keys=True).encode() + b"\n")
        except OSError as e:
            log.warning("control response not delivered", extra={"error": e})

    def _answer(self, line: bytes) -> dict[str, Any]:
        if len(line) > MAX_REQUEST_BYTES:
            return {"ok": False, "error": f"request larger than {MAX_REQUEST_BYTES} bytes"}
        try:
            request = json.loads(line)
        except ValueError as e:
            return {"ok": False, "error": f"request is not JSON: {e}"}
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            return {"ok": False, "error": "request must be a JSON object with a string 'op'"}
        try:
            return {"ok": True, "result": self.server.dispatch(request)}
        except ControlError as e:
            return {"ok": False, "error": str(e)}
        except Exception as e:
            log.exception("control request failed", extra={"op": request.get("op")})
            return {"ok": False, "error": f"internal error: {e}"}


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    # Handlers are short (one request each) and are joined on close.
    daemon_threads = False
    block_on_close = True

    def __init__(self, path: str, dispatch: Dispatch) -> None:
        self.dispatch = dispatch
        super().__init__(path, _Handler)


class ControlServer:
    def __init__(self, socket_path: Path, dispatch: Dispatch) -> None:
        self.socket_path = socket_path
        self._dispatch = dispatch
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.socket_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        self._server = _Server(str(self.socket_path), self._dispatch)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="sim-kubelet control",
            daemon=True,
        )
        self._thread.start()
        log.info("control interface listening", extra={"socket": self.socket_path})

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = None
        self._thread = None
        self.socket_path.unlink(missing_ok=True)


def call(
    socket_path: Path, request: dict[str, Any], timeout: float = CLIENT_TIMEOUT_SECONDS
) -> Any:
    """Send one request; return its result or raise ControlError with the reason."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(socket_path))
        except OSError as e:
            raise ControlUnavailable(
                f"no simulated kubelet answers on {socket_path} ({e.strerror or e})"
            ) from e
        sock.sendall(json.dumps(request).encode() + b"\n")
        with sock.makefile("rb") as reader:
            line = reader.readline()
    if not line:
        raise ControlError("the simulated kubelet closed the connection without an answer")
    response = json.loads(line)
    if not response.get("ok"):
        raise ControlError(str(response.get("error", "request refused")))
    return response.get("result")
