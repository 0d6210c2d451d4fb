"""Limits on every request, enforced before a route reads anything: the body's size, and no
NUL character in a query or path parameter."""

from __future__ import annotations

import json

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.inventory.errors import InvalidInput, Problem
from app.kubelet import names


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


class BodyLimitMiddleware:
    """Answers 413 for a body over the limit, whether it declares its length or streams it.

    The body is read into memory up to the limit and then replayed to the app, so a route never
    sees a partial body.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._reject(send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._reject(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _reject(self, send: Send) -> None:
        payload = json.dumps(
            {
                "error": {
                    "code": "payload_too_large",
                    "message": f"request body is over the limit of {self.limit} bytes",
                    "details": [
                        {
                            "field": "body",
                            "rule": "max_bytes",
                            "message": f"must be at most {self.limit} bytes",
                        }
                    ],
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})
