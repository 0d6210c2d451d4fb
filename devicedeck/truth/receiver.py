"""A webhook receiver inside the oracle: it keeps every message the service sends."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY = 1 << 20


class AlertRecorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: list[dict[str, Any]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or "0")
                try:
                    if not 0 < length <= MAX_BODY:
                        raise ValueError(f"a body of {length} bytes")
                    message = json.loads(self.rfile.read(length))
                    if not isinstance(message, dict):
                        raise ValueError("not a JSON object")
                except ValueError:
                    self.send_response(400)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with recorder._lock:
                    recorder._messages.append(message)
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the oracle reports what it received

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="truth-webhooks", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/alerts"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def messages(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._messages)
