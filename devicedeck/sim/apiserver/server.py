"""SimApiServer: the HTTP server, its kubeconfig, and the `devicedeck sim-apiserver` command.

    devicedeck sim-apiserver --data-dir /tmp/cluster --kubeconfig-out /tmp/cluster/kubeconfig
    kubectl --kubeconfig /tmp/cluster/kubeconfig get nodes

In process (tests)::

    with SimApiServer(data_dir) as api:
        api.write_kubeconfig(path)
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from devicedeck.sim.apiserver.controllers import Controllers
from devicedeck.sim.apiserver.handler import ApiHandler, Request
from devicedeck.sim.apiserver.node_lifecycle import GRACE_SECONDS
from devicedeck.sim.apiserver.store import Store
from devicedeck.sim.apiserver.tokens import TokenIssuer
from devicedeck.sim.kubelet.pods import atomic_write_text

log = logging.getLogger(__name__)

CLUSTER_NAME = "devicedeck-sim"
USER_NAME = "admin"


def url_host(host: str) -> str:
    """The host to put in a URL: wildcard addresses become loopback, IPv6 gets brackets."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: SimApiServer

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.owner.store.cond:
            self.owner.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.owner.store.cond:
            self.owner.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients dropping their connections (a watch being stopped) are normal.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class SimApiServer:
    def __init__(
        self,
        data_dir: Path | str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        admin_token: str | None = None,
        node_grace_seconds: float = GRACE_SECONDS,
    ) -> None:
        self.store = Store(Path(data_dir) if data_dir is not None else None)
        if admin_token:
            self.store.admin_token = admin_token
        self.tokens = TokenIssuer(self.store)
        self.controllers = Controllers(self.store, node_grace_seconds)
        self.connections: set[socket.socket] = set()
        owner = self

        class Handler(ApiHandler):
            api = owner

        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class Server(_HttpServer):
            address_family = family

        Server.owner = self
        self.http = Server((host, port), Handler)
        self.thread = threading.Thread(
            target=self.http.serve_forever, args=(0.1,), name="sim-apiserver", daemon=True
        )

    @property
    def address(self) -> str:
        host, port = self.http.server_address[:2]
        return f"{url_host(str(host))}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def before(self, request: Request) -> None:
        """Called with every request before it is served; raising ApiError answers it."""

    def start(self) -> SimApiServer:
        self.thread.start()
        self.controllers.start()
        log.info("sim-apiserver serving", extra={"url": self.url, "data_dir": self.store.data_dir})
        return self

    def stop(self) -> None:
        self.controllers.stop()
        self.store.close()
        # Accepting stops first: a connection accepted after the open ones were shut down (a
        # client reconnecting its watch) would go on serving requests after stop returned.
        self.http.shutdown()
        self.http.server_close()
        with self.store.cond:
            connections = list(self.connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self.thread.join()

    def __enter__(self) -> SimApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def write_kubeconfig(self, path: Path | str, server_url: str | None = None) -> Path:
        return write_kubeconfig(path, server_url or self.url, self.store.admin_token)


def write_kubeconfig(path: Path | str, server_url: str, token: str) -> Path:
    """Write a kubeconfig (mode 0600: it holds the admin token) for kubectl, curl and the
    service."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server_url}}],
        "users": [{"name": USER_NAME, "user": {"token": token}}],
        "contexts": [
            {"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": USER_NAME}}
        ],
        "current-context": CLUSTER_NAME,
    }
    path = Path(path)
    atomic_write_text(path, yaml.safe_dump(config, sort_keys=False))
    os.chmod(path, 0o600)
    return path
