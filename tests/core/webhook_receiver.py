"""A real HTTP webhook receiver on a local port, for the notification tests: it records every
message it is sent and answers each with the next status of a script (200 when it runs out)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Json = dict[str, Any]


@dataclass
class Received:
    status: int
    message: Json
    headers: dict[str, str]

    @property
    def alert(self) -> Json:
        [alert] = self.message["alerts"]
        return alert


class WebhookReceiver:
    """Listens on 127.0.0.1:`port` (a free one if 0) from start() until stop()."""

    def __init__(self, port: int = 0, answers: list[int] | None = None) -> None:
        self.port = port
        self.answers = list(answers or [])
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver._lock:
                    status = receiver.answers.pop(0) if receiver.answers else 200
                    receiver.received.append(
                        Received(status, json.loads(body), dict(self.headers.items()))
                    )
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        if self._server is None:
            self.reserve()
        assert self._server is not None
        self._server.RequestHandlerClass = Handler
        self._server.server_activate()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def reserve(self) -> WebhookReceiver:
        """Binds the port without listening: until start(), connections are refused, as by a
        receiver that is down, and no other process can take the port meanwhile."""
        self._server = ThreadingHTTPServer(
            ("127.0.0.1", self.port), BaseHTTPRequestHandler, bind_and_activate=False
        )
        try:
            self._server.server_bind()
        except BaseException:
            self._server.server_close()
            self._server = None
            raise
        self.port = self._server.server_address[1]
        return self

    def stop(self) -> None:
        if self._server is not None:
            if self._thread is not None:
                self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def accepted(self) -> list[Received]:
        """The messages it answered 2xx, in the order they came."""
        with self._lock:
            return [r for r in self.received if 200 <= r.status < 300]

    def all(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    def alerts(self) -> list[tuple[str, str, str]]:
        """(alertname, device or node, status) of each accepted message."""
        return [
            (
                r.alert["labels"]["alertname"],
                r.alert["labels"].get("device", r.alert["labels"]["node"]),
                r.message["status"],
            )
            for r in self.accepted()
        ]


@contextmanager
def running(receiver: WebhookReceiver) -> Iterator[WebhookReceiver]:
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()
