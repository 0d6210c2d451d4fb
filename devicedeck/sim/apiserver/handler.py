"""The HTTP side: routing of the REST paths, authentication, and watch streams.

Watches are chunked responses of newline-delimited WatchEvents ({"type", "object"}), from
the requested resourceVersion on (or, without one, ADDED events for what exists now first).
A version the history no longer holds answers an ERROR event carrying a 410 Expired Status.
A watch that asks for Tables (`kubectl get -w`) gets each object as a one-row Table, with
the column definitions in the first event only.
"""

from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from devicedeck.sim.apiserver import protobuf_bodies, reviews, tables
from devicedeck.sim.apiserver import resources as res
from devicedeck.sim.apiserver.errors import ApiError, bad_request
from devicedeck.sim.apiserver.objects import method_not_allowed, serve
from devicedeck.sim.apiserver.openapi.documents import (
    v2_document,
    v2_protobuf,
    v3_documents,
    v3_index,
)
from devicedeck.sim.apiserver.openapi.protobuf_v2 import ACCEPTED as V2_PROTOBUF_TYPES
from devicedeck.sim.apiserver.openapi.protobuf_v2 import MEDIA_TYPE as V2_PROTOBUF
from devicedeck.sim.apiserver.request import Request, Target, target_of
from devicedeck.sim.apiserver.selectors import matcher
from devicedeck.sim.apiserver.store import Change
from devicedeck.sim.apiserver.tokens import user_info

if TYPE_CHECKING:
    from devicedeck.sim.apiserver.server import SimApiServer

__all__ = ["ApiHandler", "Request", "Target"]

PUBLIC_PATHS = {"/version", "/healthz", "/livez", "/readyz"}
PROTOBUF_REVIEWS = {
    res.SELF_SUBJECT_ACCESS_REVIEWS: protobuf_bodies.ACCESS_REVIEW,
    res.SELF_SUBJECT_RULES_REVIEWS: protobuf_bodies.RULES_REVIEW,
    res.SELF_SUBJECT_REVIEWS: protobuf_bodies.SELF_REVIEW,
}
WATCH_TIMEOUT_DEFAULT = 1800.0
MAX_BODY = 3 * 1024 * 1024


def _first_accepted(request: Request) -> str:
    return request.headers.get("accept", "").split(",")[0].split(";")[0].strip()


def _not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


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

    def _send(self, code: int, body: dict[str, Any], warnings: list[str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for warning in warnings or []:
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.end_headers()
        self.wfile.write(data)

    def _send_bytes(self, data: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _serve(self) -> None:
        warnings: list[str] = []
        try:
            request = self._read()
            self.api.before(request)
            self._authenticate(request)
            if request.path == "/openapi/v2" and _first_accepted(request) in V2_PROTOBUF_TYPES:
                if request.method != "GET":
                    raise method_not_allowed(request.method)
                self._send_bytes(v2_protobuf(), V2_PROTOBUF)
                return
            code, body, warnings = self._route(request)
        except ApiError as e:
            code, body = e.code, e.status()
        if body is not None:
            self._send(code, body, warnings)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def _authenticate(self, request: Request) -> None:
        if request.path in PUBLIC_PATHS:
            return
        header = request.headers.get("authorization")
        if header is None:
            # kubectl sends no credentials to a plain-HTTP server; like the kube-apiserver's
            # old insecure port, a request without any is the cluster admin's.
            request.user = reviews.ADMIN_USER
            return
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        if token and token == self.api.store.admin_token:
            request.user = reviews.ADMIN_USER
            return
        if token:
            try:
                request.user = user_info(self.api.tokens.verify(token))
                return
            except (ApiError, ValueError):
                pass
        raise ApiError(401, "Unauthorized", "Unauthorized")

    # --- routing --------------------------------------------------------------------------

    def _route(self, request: Request) -> tuple[int, dict[str, Any] | None, list[str]]:
        parts = [p for p in request.path.split("/") if p]
        document = self._discovery(parts)
        if document is not None:
            if request.method != "GET":
                raise method_not_allowed(request.method)
            return 200, document, []
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _not_found()
        if version == "v1" and len(rest) == 1 and (group, rest[0]) in res.REVIEW_BY_PATH:
            if request.method != "POST":
                raise method_not_allowed(request.method)
            return 201, self._review(res.REVIEW_BY_PATH[(group, rest[0])], request), []
        if (
            group == ""
            and len(rest) == 5
            and rest[0] == "namespaces"
            and rest[2] == "serviceaccounts"
            and rest[4] == "token"
        ):
            if request.method != "POST":
                raise method_not_allowed(request.method)
            return 201, self.api.tokens.request(rest[1], rest[3], request.json()), []
        target = target_of(group, version, rest)
        if target is None:
            raise _not_found()
        if request.method == "GET" and request.watching:
            if target.name is not None:
                raise method_not_allowed("GET with watch on a single object")
            self._watch(request, target)
            return 200, None, []
        answer = serve(self.api.store, request, target)
        return answer.code, answer.body, answer.warnings

    def _review(self, review: res.Review, request: Request) -> dict[str, Any]:
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        if content_type == protobuf_bodies.PROTOBUF and review in PROTOBUF_REVIEWS:
            body = protobuf_bodies.decode(request.body, PROTOBUF_REVIEWS[review])
        elif content_type in ("", "application/json"):
            body = request.json()
        else:
            accepted = ["application/json"]
            accepted += [protobuf_bodies.PROTOBUF] if review in PROTOBUF_REVIEWS else []
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(accepted)}",
            )
        if review is res.TOKEN_REVIEWS:
            return self.api.tokens.review(body)
        if review is res.SELF_SUBJECT_REVIEWS:
            return reviews.self_subject_review(request.user or {}, body)
        if review is res.SELF_SUBJECT_ACCESS_REVIEWS:
            return reviews.access_review(body)
        return reviews.rules_review(body)

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
        if parts[:1] == ["openapi"]:
            return self._openapi(parts[1:])
        return None

    def _openapi(self, parts: list[str]) -> dict[str, Any]:
        if parts == ["v2"]:
            return v2_document()
        if parts == ["v3"]:
            return v3_index()
        document = v3_documents().get("/".join(parts[1:])) if parts[:1] == ["v3"] else None
        if document is None:
            raise _not_found()
        return document

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
        wanted = tables.wanted_table(
            request.headers.get("accept", ""), request.param("includeObject")
        )
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
        emit = _Emitter(self, target.resource.kind, wanted)
        try:
            for obj in initial:
                emit("ADDED", obj)
            self._follow(target, matches, position, epoch, deadline, emit)
        except OSError:
            self.close_connection = True

    def _follow(
        self,
        target: Target,
        matches: Any,
        position: int,
        epoch: int,
        deadline: float,
        emit: _Emitter,
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
                if change.type == "BOOKMARK":
                    self._event(change.type, change.object)
                elif matches(change.object):
                    emit(change.type, change.object)
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


class _Emitter:
    """Writes a watch's events: the objects, or one-row Tables when Tables were asked for."""

    def __init__(self, handler: ApiHandler, kind: str, wanted: tables.TableRequest | None) -> None:
        self.handler = handler
        self.kind = kind
        self.wanted = wanted
        self.headers = True

    def __call__(self, event: str, obj: dict[str, Any]) -> None:
        if self.wanted is not None:
            version = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            obj = tables.table(self.kind, [obj], self.wanted, version, headers=self.headers)
            self.headers = False
        self.handler._event(event, obj)
