"""A small Kubernetes API server fake that speaks the real HTTP API for what Devicedeck uses.

Real HTTP on a localhost port, driven by the official client:
- GET lists with `items`, `metadata.resourceVersion`, and `limit`/`continue` paging;
- watches (`?watch=true&resourceVersion=N`): chunked, newline-delimited JSON events ADDED,
  MODIFIED, DELETED, BOOKMARK; an ERROR event carrying a 410 Status for versions older than
  the oldest one kept (after `expire_history`);
- PATCH nodes/{name}/status with JSON Patch (RFC 6902 add/replace/remove/test, RFC 6901
  "~1"/"~0" unescaping), answering errors as Status objects;
- 403 Forbidden Status for collections the test denies, 404 for ones "not served".
Every request is recorded so tests can assert what was sent.
"""

from __future__ import annotations

import contextlib
import copy
import socket
import sys
import threading
import uuid
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from .fake_http import KINDS, NAMESPACED, FakeApiHandler, RecordedRequest
from .json_patch import status_object


@dataclass
class _State:
    rv: int = 100
    objects: dict[str, dict[str, dict[str, Any]]] = field(
        default_factory=lambda: {name: {} for name in KINDS}
    )
    history: list[tuple[int, str, str, dict[str, Any]]] = field(default_factory=list)
    oldest_rv: int = 0
    denied: set[str] = field(default_factory=set)
    not_served: set[str] = field(default_factory=set)
    patch_refusal: dict[str, Any] | None = None
    # Open watches end when this changes: "drop" cuts the connection, "expire" sends 410.
    watch_epoch: int = 0
    epoch_action: str = "drop"


class FakeApiServer:
    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.state = _State()
        self.cond = threading.Condition()
        self.requests: list[RecordedRequest] = []
        self.closing = False
        self._connections: set[socket.socket] = set()
        fake = self

        class Handler(FakeApiHandler):
            server_fake = fake

        class Server(ThreadingHTTPServer):
            def process_request(self, request: Any, client_address: Any) -> None:
                with fake.cond:
                    fake._connections.add(request)
                super().process_request(request, client_address)

            def handle_error(self, request: Any, client_address: Any) -> None:
                # Clients closing keep-alive connections abruptly (the service stopping its
                # watches) are normal here; anything else is a bug in the fake: show it.
                error = sys.exc_info()[1]
                if not isinstance(error, ConnectionError):
                    super().handle_error(request, client_address)

            def shutdown_request(self, request: Any) -> None:
                with fake.cond:
                    fake._connections.discard(request)
                super().shutdown_request(request)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, args=(0.05,), name="fake-apiserver"
        )

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeApiServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    # What a test does to the cluster ----------------------------------------------------------

    def _key(self, collection: str, obj: dict[str, Any]) -> str:
        meta = obj["metadata"]
        if collection in NAMESPACED:
            return f"{meta['namespace']}/{meta['name']}"
        return meta["name"]

    def put(self, collection: str, obj: dict[str, Any], *, silent: bool = False) -> dict[str, Any]:
        """Create or replace an object. `silent`: no watch event, as if it was compacted away."""
        with self.cond:
            obj = copy.deepcopy(obj)
            api_version, kind = KINDS[collection]
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
            meta = obj.setdefault("metadata", {})
            key = self._key(collection, obj)
            existing = self.state.objects[collection].get(key)
            meta.setdefault(
                "uid", (existing or {}).get("metadata", {}).get("uid") or str(uuid.uuid4())
            )
            meta.setdefault("creationTimestamp", "2026-12-01T10:00:00Z")
            self.state.rv += 1
            meta["resourceVersion"] = str(self.state.rv)
            self.state.objects[collection][key] = obj
            if not silent:
                event = "MODIFIED" if existing is not None else "ADDED"
                self.state.history.append((self.state.rv, collection, event, copy.deepcopy(obj)))
            self.cond.notify_all()
            return copy.deepcopy(obj)

    def delete(self, collection: str, name: str, namespace: str | None = None) -> None:
        with self.cond:
            key = f"{namespace}/{name}" if namespace else name
            obj = self.state.objects[collection].pop(key)
            self.state.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.state.rv)
            self.state.history.append((self.state.rv, collection, "DELETED", obj))
            self.cond.notify_all()

    def bookmark(self, collection: str) -> int:
        """Send open watches a BOOKMARK: the collection is current up to a newer version."""
        with self.cond:
            self.state.rv += 1
            api_version, kind = KINDS[collection]
            marker = {
                "kind": kind,
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(self.state.rv)},
            }
            self.state.history.append((self.state.rv, collection, "BOOKMARK", marker))
            self.cond.notify_all()
            return self.state.rv

    def get(self, collection: str, key: str) -> dict[str, Any]:
        with self.cond:
            return copy.deepcopy(self.state.objects[collection][key])

    def expire_history(self) -> None:
        """Compact: every version up to now is gone; open watches get a 410 ERROR event."""
        with self.cond:
            self.state.oldest_rv = self.state.rv + 1
            self.state.history.clear()
            self.state.watch_epoch += 1
            self.state.epoch_action = "expire"
            self.cond.notify_all()

    def drop_watches(self) -> None:
        """Cut every open watch connection without a goodbye, like a dying load balancer."""
        with self.cond:
            self.state.watch_epoch += 1
            self.state.epoch_action = "drop"
            self.cond.notify_all()

    def deny(self, collection: str) -> None:
        with self.cond:
            self.state.denied.add(collection)
            self.state.watch_epoch += 1
            self.state.epoch_action = "drop"
            self.cond.notify_all()

    def allow(self, collection: str) -> None:
        with self.cond:
            self.state.denied.discard(collection)

    def stop_serving(self, collection: str) -> None:
        with self.cond:
            self.state.not_served.add(collection)

    def refuse_next_patch(self, code: int, reason: str, message: str) -> None:
        with self.cond:
            self.state.patch_refusal = status_object(code, reason, message)

    def recorded(self, method: str | None = None, path: str | None = None) -> list[RecordedRequest]:
        with self.cond:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method) and (path is None or r.path == path)
            ]

    def lists(self, collection_path: str) -> int:
        return sum(
            1
            for r in self.recorded("GET", collection_path)
            if r.query.get("watch", [""])[0] not in ("true", "1")
        )
