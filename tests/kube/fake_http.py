"""The fake API server's HTTP side: lists, chunked watch streams, JSON Patch on node status."""

from __future__ import annotations

import copy
import json
import socket
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from .json_patch import PatchError, apply_json_patch, status_object

if TYPE_CHECKING:
    from .fake_apiserver import FakeApiServer

COLLECTIONS = {
    "/api/v1/nodes": "nodes",
    "/api/v1/pods": "pods",
    "/apis/resource.k8s.io/v1/resourceslices": "resourceslices",
    "/apis/resource.k8s.io/v1/resourceclaims": "resourceclaims",
}
KINDS = {
    "nodes": ("v1", "Node"),
    "pods": ("v1", "Pod"),
    "resourceslices": ("resource.k8s.io/v1", "ResourceSlice"),
    "resourceclaims": ("resource.k8s.io/v1", "ResourceClaim"),
}
NAMESPACED = {"pods", "resourceclaims"}


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)


class FakeApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_fake: FakeApiServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        return

    def _record(self) -> RecordedRequest:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        recorded = RecordedRequest(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        with self.server_fake.cond:
            self.server_fake.requests.append(recorded)
        return recorded

    def _send_json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_status(self, code: int, reason: str, message: str) -> None:
        self._send_json(code, status_object(code, reason, message))

    def _authorized(self, request: RecordedRequest) -> bool:
        token = self.server_fake.token
        if token and request.headers.get("authorization") != f"Bearer {token}":
            self._send_status(401, "Unauthorized", "Unauthorized")
            return False
        return True

    def do_GET(self) -> None:
        request = self._record()
        if not self._authorized(request):
            return
        collection = COLLECTIONS.get(request.path)
        fake = self.server_fake
        if collection is None:
            self._send_status(404, "NotFound", f"the server could not find {request.path}")
            return
        if collection in fake.state.not_served:
            self._send_status(404, "NotFound", "the server could not find the requested resource")
            return
        if collection in fake.state.denied:
            self._send_status(
                403,
                "Forbidden",
                f'{collection} is forbidden: User "system:serviceaccount:devicedeck:devicedeck" '
                f'cannot list resource "{collection}" in API group "" at the cluster scope',
            )
            return
        if request.query.get("watch", [""])[0] in ("true", "1"):
            self._watch(collection, request)
        else:
            self._list(collection, request)

    def _list(self, collection: str, request: RecordedRequest) -> None:
        fake = self.server_fake
        with fake.cond:
            items = [copy.deepcopy(o) for _, o in sorted(fake.state.objects[collection].items())]
            rv = str(fake.state.rv)
        limit = int(request.query.get("limit", ["0"])[0])
        start = int(request.query.get("continue", ["0"])[0] or 0)
        end = start + limit if limit else len(items)
        metadata: dict[str, Any] = {"resourceVersion": rv}
        if end < len(items):
            metadata["continue"] = str(end)
        api_version, kind = KINDS[collection]
        self._send_json(
            200,
            {
                "kind": f"{kind}List",
                "apiVersion": api_version,
                "metadata": metadata,
                "items": items[start:end],
            },
        )

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, collection: str, request: RecordedRequest) -> None:
        fake = self.server_fake
        since = int(request.query.get("resourceVersion", ["0"])[0] or 0)
        timeout = float(request.query.get("timeoutSeconds", ["60"])[0])
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with fake.cond:
            epoch = fake.state.watch_epoch
            expired = since < fake.state.oldest_rv
        if expired:
            self._send_gone(since)
            return
        position = since
        try:
            while True:
                with fake.cond:
                    pending = [
                        (rv, kind, obj)
                        for rv, name, kind, obj in fake.state.history
                        if name == collection and rv > position
                    ]
                    ended = fake.state.watch_epoch != epoch
                    action = fake.state.epoch_action
                    if not pending and not ended and not fake.closing:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        fake.cond.wait(min(remaining, 0.5))
                        continue
                for rv, kind, obj in pending:
                    self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                    position = rv
                if fake.closing:
                    break
                if ended:
                    if action == "expire":
                        self._send_gone(position)
                        return
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _send_gone(self, since: int) -> None:
        status = status_object(
            410,
            "Expired",
            f"too old resource version: {since} ({self.server_fake.state.oldest_rv})",
        )
        try:
            self._chunk(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def do_PATCH(self) -> None:
        request = self._record()
        if not self._authorized(request):
            return
        fake = self.server_fake
        parts = request.path.strip("/").split("/")
        if len(parts) != 5 or parts[:3] != ["api", "v1", "nodes"] or parts[4] != "status":
            self._send_status(404, "NotFound", f"the server could not find {request.path}")
            return
        name = parts[3]
        if request.headers.get("content-type", "").split(";")[0] != "application/json-patch+json":
            self._send_status(
                415, "UnsupportedMediaType", "the body of the request was in an unknown format"
            )
            return
        with fake.cond:
            refusal, fake.state.patch_refusal = fake.state.patch_refusal, None
            node = fake.state.objects["nodes"].get(name)
        if refusal is not None:
            self._send_json(int(refusal["code"]), refusal)
            return
        if node is None:
            self._send_status(404, "NotFound", f'nodes "{name}" not found')
            return
        try:
            patched = apply_json_patch(node, json.loads(request.body))
        except PatchError as e:
            self._send_json(int(e.status["code"]), e.status)
            return
        except ValueError as e:
            self._send_status(400, "BadRequest", f"invalid JSON: {e}")
            return
        # The status subresource keeps everything outside .status as it was.
        patched = {**copy.deepcopy(node), "status": patched.get("status", {})}
        patched["metadata"] = dict(patched["metadata"])
        patched["metadata"].pop("resourceVersion", None)
        self._send_json(200, fake.put("nodes", patched))
