"""The HTTP side: routing of the REST paths, authentication, lists, writes and watch streams.

Watches are chunked responses of newline-delimited WatchEvents ({"type", "object"}), from
the requested resourceVersion on (or, without one, ADDED events for what exists now first).
A version the history no longer holds answers an ERROR event carrying a 410 Expired Status.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from devicedeck.sim.apiserver import resources as res
from devicedeck.sim.apiserver.errors import ApiError, bad_request
from devicedeck.sim.apiserver.patches import PATCH_TYPES
from devicedeck.sim.apiserver.selectors import matcher
from devicedeck.sim.apiserver.store import Change

if TYPE_CHECKING:
    from devicedeck.sim.apiserver.server import SimApiServer

PUBLIC_PATHS = {"/version", "/healthz", "/livez", "/readyz"}
WATCH_TIMEOUT_DEFAULT = 1800.0
MAX_BODY = 3 * 1024 * 1024


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes = b""

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except ValueError as e:
            raise bad_request(f"the body of the request is not valid JSON: {e}") from e

    def param(self, name: str, default: str = "") -> str:
        return self.query.get(name, [default])[0]

    @property
    def watching(self) -> bool:
        return self.param("watch") in ("true", "1")


@dataclass(frozen=True)
class Target:
    """What a REST path names: a resource, maybe a namespace, a name and a subresource."""

    resource: res.Resource
    namespace: str | None
    name: str | None
    subresource: str | None


def _method_not_allowed(method: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"the server does not allow this method ({method})")


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api: SimApiServer

    def log_message(self, format: str, *args: Any) -> None:
        return  # requests are not logged one by one

    # --- plumbing -------------------------------------------------------------------------

    def _read(self) -> Request:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ApiError(413, "RequestEntityTooLarge", "the request body is too large")
        body = self.rfile.read(length) if length else b""
        return Request(
            self.command,
            unquote(parts.path),
            parse_qs(parts.query),
            {k.lower(): v for k, v in self.headers.items()},
            body,
        )

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _serve(self) -> None:
        try:
            request = self._read()
            self.api.before(request)
            self._authenticate(request)
            code, body = self._route(request)
        except ApiError as e:
            code, body = e.code, e.status()
        if body is not None:
            self._send(code, body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def _authenticate(self, request: Request) -> None:
        if request.path in PUBLIC_PATHS:
            return
        header = request.headers.get("authorization")
        if header is None:
            # kubectl sends no credentials to a plain-HTTP server; like the kube-apiserver's
            # old insecure port, a request without any is the cluster admin's.
            return
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        if token and token == self.api.store.admin_token:
            return
        if token:
            try:
                self.api.tokens.verify(token)
                return
            except (ApiError, ValueError):
                pass
        raise ApiError(401, "Unauthorized", "Unauthorized")

    # --- routing --------------------------------------------------------------------------

    def _route(self, request: Request) -> tuple[int, dict[str, Any] | None]:
        parts = [p for p in request.path.split("/") if p]
        discovery = self._discovery(parts)
        if discovery is not None:
            if request.method != "GET":
                raise _method_not_allowed(request.method)
            return 200, discovery
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise self._no_path(request)
        if group == res.AUTH_GROUP and version == "v1" and rest == ["tokenreviews"]:
            if request.method != "POST":
                raise _method_not_allowed(request.method)
            return 201, self.api.tokens.review(request.json())
        if (
            group == ""
            and len(rest) == 5
            and rest[0] == "namespaces"
            and rest[2] == "serviceaccounts"
            and rest[4] == "token"
        ):
            if request.method != "POST":
                raise _method_not_allowed(request.method)
            return 201, self.api.tokens.request(rest[1], rest[3], request.json())
        target = self._target(group, version, rest)
        if target is None:
            raise self._no_path(request)
        return self._handle(request, target)

    def _no_path(self, request: Request) -> ApiError:
        return ApiError(404, "NotFound", "the server could not find the requested resource")

    def _discovery(self, parts: list[str]) -> dict[str, Any] | None:
        if parts == ["version"]:
            return res.version_info()
        if parts in (["healthz"], ["livez"], ["readyz"]):
            return {"status": "ok"}
        if parts == ["api"]:
            return res.api_versions(self.api.address)
        if parts == ["api", "v1"]:
            return res.resource_list("", "v1")
        if parts == ["apis"]:
            return res.api_groups()
        if len(parts) == 2 and parts[0] == "apis":
            return res.api_group(parts[1])
        if len(parts) == 3 and parts[0] == "apis":
            return res.resource_list(parts[1], parts[2])
        return None

    def _target(self, group: str, version: str, rest: list[str]) -> Target | None:
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not 1 <= len(rest) <= 3:
            return None
        resource = res.BY_PATH.get((group, version, rest[0]))
        if resource is None or (namespace is not None and not resource.namespaced):
            return None
        name = rest[1] if len(rest) >= 2 else None
        subresource = rest[2] if len(rest) == 3 else None
        if subresource is not None and (subresource != "status" or not resource.has_status):
            return None
        if resource.namespaced and name is not None and namespace is None:
            return None
        return Target(resource, namespace, name, subresource)

    def _handle(self, request: Request, target: Target) -> tuple[int, dict[str, Any] | None]:
        store = self.api.store
        resource, namespace, name = target.resource, target.namespace, target.name
        method = request.method
        if name is None:
            if method == "GET":
                if request.watching:
                    self._watch(request, target)
                    return 200, None
                return 200, self._list(request, target)
            if method == "POST" and (namespace is not None or not resource.namespaced):
                return 201, store.create(resource, namespace, request.json())
            raise _method_not_allowed(method)
        if method == "GET":
            return 200, store.get(resource, namespace, name)
        if method == "PUT":
            created, obj = store.replace(
                resource, namespace, name, request.json(), subresource=target.subresource
            )
            return (201 if created else 200), obj
        if method == "PATCH":
            content_type = request.headers.get("content-type", "").split(";")[0].strip()
            if content_type not in PATCH_TYPES:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: {', '.join(PATCH_TYPES)}",
                )
            return 200, store.update(
                resource,
                namespace,
                name,
                request.json(),
                subresource=target.subresource,
                content_type=content_type,
            )
        if method == "DELETE" and target.subresource is None:
            options = request.json() if request.body else {}
            preconditions = options.get("preconditions") if isinstance(options, dict) else None
            return 200, store.delete(resource, namespace, name, preconditions)
        raise _method_not_allowed(method)

    def _list(self, request: Request, target: Target) -> dict[str, Any]:
        matches = matcher(
            target.resource,
            target.namespace,
            request.param("fieldSelector") or None,
            request.param("labelSelector") or None,
        )
        items, version = self.api.store.list(target.resource, matches)
        metadata: dict[str, Any] = {"resourceVersion": str(version)}
        limit_text, token = request.param("limit"), request.param("continue")
        if token:
            try:
                version, after = json.loads(_unb64(token))
            except (ValueError, TypeError) as e:
                raise bad_request(f"continue key is not valid: {e}") from e
            items = [i for i in items if _sort_key(i) > after]
            metadata["resourceVersion"] = str(version)
        if limit_text.isdigit() and 0 < int(limit_text) < len(items):
            items = items[: int(limit_text)]
            metadata["continue"] = _b64(json.dumps([version, _sort_key(items[-1])]))
        return {
            "kind": f"{target.resource.kind}List",
            "apiVersion": target.resource.api_version,
            "metadata": metadata,
            "items": items,
        }

    # --- watch ----------------------------------------------------------------------------

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

    def _watch(self, request: Request, target: Target) -> None:
        store = self.api.store
        matches = matcher(
            target.resource,
            target.namespace,
            request.param("fieldSelector") or None,
            request.param("labelSelector") or None,
        )
        if target.name is not None:
            raise _method_not_allowed("GET with watch on a single object")
        since_text = request.param("resourceVersion")
        try:
            timeout = float(request.param("timeoutSeconds") or WATCH_TIMEOUT_DEFAULT)
        except ValueError as e:
            raise bad_request(f"timeoutSeconds: {e}") from e
        if since_text and not since_text.isdigit():
            raise bad_request(f"resourceVersion {since_text!r} is not a valid version")
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with store.cond:
            epoch = store.watch_epoch
            if since_text in ("", "0"):
                initial, position = store.list(target.resource, matches)
            else:
                initial, position = [], int(since_text)
                if position < store.oldest_watchable:
                    self._gone(position)
                    return
        try:
            for obj in initial:
                self._event("ADDED", obj)
            self._follow(target, matches, position, epoch, deadline)
        except OSError:
            self.close_connection = True

    def _follow(
        self, target: Target, matches: Any, position: int, epoch: int, deadline: float
    ) -> None:
        store = self.api.store
        plural = target.resource.plural
        while True:
            with store.cond:
                pending: list[Change] = []
                # The history is in version order: read back only as far as this watch got.
                for change in reversed(store.history):
                    if change.resource_version <= position:
                        break
                    if change.plural == plural:
                        pending.append(change)
                pending.reverse()
                ended = store.watch_epoch != epoch
                action = store.epoch_action
                if not pending and not ended and not store.closing:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    store.cond.wait(min(remaining, 0.5))
                    continue
            for change in pending:
                position = change.resource_version
                if change.type == "BOOKMARK" or matches(change.object):
                    self._event(change.type, change.object)
            if store.closing:
                break
            if ended:
                if action == "expire":
                    self._gone(position)
                    return
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _gone(self, since: int) -> None:
        error = ApiError(
            410,
            "Expired",
            f"too old resource version: {since} ({self.api.store.oldest_watchable})",
        )
        try:
            self._event("ERROR", error.status())
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True


def _sort_key(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def _unb64(text: str) -> str:
    return base64.urlsafe_b64decode(text.encode()).decode()
