"""The agent's own /healthz and /metrics (Prometheus text or OpenMetrics), on an optional port."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import choose_encoder

log = logging.getLogger(__name__)


class AgentMetrics:
    """One registry per agent, so agents built in one process (tests) do not collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.snapshots_sent = Counter(
            "devicedeck_agent_snapshots_sent_total",
            "Snapshots the service accepted, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.push_failures = Counter(
            "devicedeck_agent_push_failures_total",
            "Snapshot posts that failed, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.last_success = Gauge(
            "devicedeck_agent_last_success_timestamp_seconds",
            "Unix time of the last snapshot the service accepted.",
            registry=self.registry,
        )
        self.pending_streams = Gauge(
            "devicedeck_agent_pending_streams",
            "Streams whose latest state the service has not accepted yet.",
            registry=self.registry,
        )
        self.kubelet_errors = Counter(
            "devicedeck_agent_kubelet_call_errors_total",
            "Failed reads of kubelet interfaces, by call and gRPC status code.",
            ["call", "code"],
            registry=self.registry,
        )
        self.kubelet_last_success = Gauge(
            "devicedeck_agent_kubelet_last_success_timestamp_seconds",
            "Unix time of the last successful PodResources call.",
            registry=self.registry,
        )
        self.tap_connected = Gauge(
            "devicedeck_agent_tap_connected",
            "1 while the agent's own ListAndWatch stream on the resource's plugin is open.",
            ["resource"],
            registry=self.registry,
        )
        self.dra_health_connected = Gauge(
            "devicedeck_agent_dra_health_connected",
            "1 while the agent's DRA health stream (NodeWatchResources) on the driver is open.",
            ["driver"],
            registry=self.registry,
        )

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition the scraper asked for by its Accept header (OpenMetrics or the text
        format), and its content type."""
        encode, content_type = choose_encoder(accept or "")
        return encode(self.registry), content_type


HealthCheck = Callable[[], tuple[bool, dict[str, Any]]]


class MetricsServer:
    """Serves GET /metrics and GET /healthz from a thread it owns."""

    def __init__(self, host: str, port: int, metrics: AgentMetrics, health: HealthCheck) -> None:
        self._metrics = metrics
        self._health = health
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        metrics, health = self._metrics, self._health

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    exposition, content_type = metrics.render(self.headers.get("Accept"))
                    self._send(200, content_type, exposition, vary="Accept")
                elif path == "/healthz":
                    ok, details = health()
                    body = json.dumps({"status": "ok" if ok else "failing", **details})
                    self._send(200 if ok else 503, "application/json", body.encode())
                else:
                    self._send(404, "text/plain; charset=utf-8", b"not found\n")

            def _send(
                self, status: int, content_type: str, body: bytes, vary: str | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                if vary:
                    self.send_header("Vary", vary)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug(format, *args, extra={"event": "metrics_request"})

        return Handler

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.5},
            name="agent-metrics",
            daemon=True,
        )
        self._thread.start()
        host, port = self._server.server_address[:2]
        log.info(
            "serving metrics",
            extra={"event": "metrics_listening", "address": f"{host!s}:{port}"},
        )

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
