"""Limits on every request, enforced before a route reads anything: how many at once, the
body's size and how long it may take to arrive, and no NUL character in a query or path
parameter.

Requests come in classes, each limited apart, so that traffic of one kind cannot take the
places of another: agents' snapshots (ingest), the dashboard's forms (which anyone may post,
signing in included, so their bodies arrive before anything is known of the caller), and the
rest (reads and the API's other writes)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum

import anyio
from fastapi import Request
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from devicedeck.inventory.errors import InvalidInput, Problem
from devicedeck.kubelet import names


async def reject_nul_parameters(request: Request) -> None:
    """Query and path parameters with a NUL character are invalid input.

    PostgreSQL text cannot hold NUL, so such a value would fail in the database as a 5xx.
    """
    params = [*request.query_params.multi_items(), *request.path_params.items()]
    problems = [
        Problem(name, "no_nul", "must not contain NUL characters")
        for name, value in params
        if "\x00" in str(value)
    ]
    problems += [
        Problem(name, "utf8", problem)
        for name, value in params
        if (problem := names.text_problem(str(value)))
    ]
    if problems:
        raise InvalidInput("a parameter contains a character the service cannot store", problems)


async def send_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    details: list[dict[str, str]] | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """An error in the API's shape, straight from a middleware (outside the app's handlers)."""
    payload = json.dumps(
        {"error": {"code": code, "message": message, "details": details or []}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


METHODS_WITHOUT_BODY = ("GET", "HEAD", "OPTIONS")

# After these the request's body is not read to its end, so the connection cannot carry
# another request.
CLOSE = [(b"connection", b"close")]


INGEST_PREFIX = "/api/v1/ingest/"
API_PREFIX = "/api/"


class RequestClass(StrEnum):
    INGEST = "ingest"
    FORMS = "forms"
    REQUESTS = "requests"


def request_class(scope: Scope) -> RequestClass:
    """Which class's limits a request counts against: its path and method say, before any of
    it is read."""
    path: str = scope["path"]
    if path.startswith(INGEST_PREFIX):
        return RequestClass.INGEST
    if scope["method"] not in METHODS_WITHOUT_BODY and not path.startswith(API_PREFIX):
        return RequestClass.FORMS
    return RequestClass.REQUESTS


class _TooLarge(Exception):
    pass


class _Disconnected(Exception):
    pass


class BodyNotRead(HTTPException):
    """Raised to the app in place of a body this middleware would not hand on; by then the
    middleware has answered (or the client has gone), and whatever the app answers is dropped."""


def _has_body(scope: Scope) -> bool:
    headers = dict(scope["headers"])
    length = headers.get(b"content-length")
    return (length is not None and length.strip() not in (b"", b"0")) or (
        b"transfer-encoding" in headers
    )


class BodyLimitMiddleware:
    """Answers 413 for a body over the limit, whether it declares its length or streams it, and
    408 for a body that has not all arrived within the read timeout: a form's body, which may
    come from anyone, has a shorter one than the API's, whose callers are checked first.

    Nothing is read until the app asks for the body, so a route can refuse a caller without
    reading it (devicedeck/web/caller_first.py). Then the whole body is read into memory up to the
    limit and handed on in one piece, so a route never sees a partial body. The timeout covers
    the whole body, not each read: a sender trickling a byte at a time holds a request open
    for no longer than one that sends nothing. An answer sent while the body is still unread
    closes the connection, since the rest of the body would still be on it.
    """

    def __init__(
        self, app: ASGIApp, limit: int, read_timeout: float, form_read_timeout: float
    ) -> None:
        self.app = app
        self.limit = limit
        self.read_timeout = read_timeout
        self.form_read_timeout = form_read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in METHODS_WITHOUT_BODY:
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(send)
            return
        unread = _has_body(scope)
        answered = False
        read_timeout = (
            self.form_read_timeout
            if request_class(scope) is RequestClass.FORMS
            else self.read_timeout
        )

        async def read_whole_body() -> Message:
            nonlocal unread, answered
            if not unread:
                return await receive()
            try:
                with anyio.fail_after(read_timeout):
                    body = await self._read(receive)
            except TimeoutError:
                answered = True
                await self._timed_out(send, read_timeout)
                raise BodyNotRead(408) from None
            except _TooLarge:
                answered = True
                await self._too_large(send)
                raise BodyNotRead(413) from None
            except _Disconnected:
                answered = True
                raise BodyNotRead(400) from None
            unread = False
            return {"type": "http.request", "body": body, "more_body": False}

        async def answer(message: Message) -> None:
            if answered:
                return
            if message["type"] == "http.response.start" and unread:
                message = {**message, "headers": [*message.get("headers", []), *CLOSE]}
            await send(message)

        await self.app(scope, read_whole_body, answer)

    async def _read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                raise _TooLarge()
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)

    async def _too_large(self, send: Send) -> None:
        await send_error(
            send,
            413,
            "payload_too_large",
            f"request body is over the limit of {self.limit} bytes",
            [
                {
                    "field": "body",
                    "rule": "max_bytes",
                    "message": f"must be at most {self.limit} bytes",
                }
            ],
            CLOSE,
        )

    async def _timed_out(self, send: Send, read_timeout: float) -> None:
        seconds = f"{read_timeout:g}"
        await send_error(
            send,
            408,
            "request_timeout",
            f"the request body did not arrive in full within {seconds} seconds; nothing was "
            "changed, and the connection is closed",
            [
                {
                    "field": "body",
                    "rule": "read_timeout",
                    "message": f"must arrive within {seconds} seconds",
                }
            ],
            CLOSE,
        )


# Probes must answer while the service is busy, or an orchestrator restarts a process that
# is only working hard.
UNLIMITED_PATHS = frozenset({"/livez", "/readyz"})


def _is_event_stream(message: Message) -> bool:
    for name, value in message.get("headers", []):
        if name.lower() == b"content-type":
            return bytes(value).startswith(b"text/event-stream")
    return False


class ConcurrencyLimitMiddleware:
    """At most so many requests of each class in this process at once; one more is answered
    503 with Retry-After at once, not queued, so an overloaded service sheds work instead of
    piling it up.

    A request holds its place until its answer is sent in full. An event stream gives its place
    back as soon as it starts: it may stay open for hours and costs little while it waits.
    """

    def __init__(self, app: ASGIApp, limits: Mapping[RequestClass, int]) -> None:
        self.app = app
        self.limits = dict(limits)
        self.in_flight = dict.fromkeys(RequestClass, 0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNLIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        kind = request_class(scope)
        limit = self.limits[kind]
        if self.in_flight[kind] >= limit:
            what = "" if kind is RequestClass.REQUESTS else f"{kind.value} "
            await send_error(
                send,
                503,
                "overloaded",
                f"the service is answering its limit of {limit} {what}requests at once; "
                "nothing was changed, try again",
                headers=[
                    (b"retry-after", b"1"),
                    *(CLOSE if scope["method"] not in METHODS_WITHOUT_BODY else []),
                ],
            )
            return
        # One event loop runs this: no other request can change the count between the check
        # above and here.
        self.in_flight[kind] += 1
        holding = True

        def give_back() -> None:
            nonlocal holding
            if holding:
                holding = False
                self.in_flight[kind] -= 1

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and _is_event_stream(message):
                give_back()
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                # Before the answer's end leaves: a caller who has the answer and asks again
                # must find its place free, not depend on when this coroutine resumes.
                give_back()
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            give_back()
