"""`devicedeck demo-receiver`: a webhook receiver for the demo that logs every alert it gets.

The demo points the service's DEVICEDECK_WEBHOOK_URL at it, so the notifications the service
sends (a device turning unhealthy, a node going stale, and each one ending) can be watched
in the data directory's logs/webhooks.log without any other software. It takes Alertmanager's
webhook JSON, as any receiver would, and answers 204.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devicedeck.signals import wait_for_stop

log = logging.getLogger(__name__)

# Larger bodies are refused: the service sends one alert per message.
MAX_BODY = 1 << 20


def alert_fields(alert: dict[str, Any]) -> dict[str, Any]:
    """What a line says about one alert: its state, name, what it is about, its summary."""
    labels = alert.get("labels") or {}
    fields = {
        "status": alert.get("status"),
        "alertname": labels.get("alertname"),
        "node": labels.get("node"),
    }
    for optional in ("resource", "device", "namespace", "pod"):
        if labels.get(optional):
            fields[optional] = labels[optional]
    fields["summary"] = (alert.get("annotations") or {}).get("summary")
    fields["fingerprint"] = alert.get("fingerprint")
    return fields


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or "0")
            if not 0 < length <= MAX_BODY:
                raise ValueError(f"a body of {length} bytes")
            message = json.loads(self.rfile.read(length))
            alerts = message["alerts"]
        except (ValueError, KeyError, TypeError) as e:
            log.warning("webhook not understood", extra={"event": "webhook_refused", "error": e})
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        for alert in alerts:
            log.info("webhook received", extra={"event": "webhook_received", **alert_fields(alert)})
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # each alert has its own line above


def serve(host: str, port: int, stop: threading.Event) -> None:
    """Receive webhooks on host:port until `stop` is set."""
    server = ThreadingHTTPServer((host, port), _Handler)
    thread = threading.Thread(target=server.serve_forever, name="demo-receiver", daemon=True)
    thread.start()
    log.info(
        "webhook receiver listening",
        extra={"event": "receiver_listening", "url": f"http://{host}:{port}/"},
    )
    try:
        wait_for_stop(stop)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
