"""Who is calling, checked before a single byte of the request body is read.

FastAPI reads and parses a route's body before it runs the route's dependencies, so a bearer
check written as a dependency alone would let anyone make the service wait for, buffer and parse
a body of up to the limit. Dependencies that check the caller are marked with
`checked_before_body`, and routers whose routes take a body use `CallerFirstRoute`, which runs
the marked checks on the bare request first. A refusal then goes through the app's exception
handlers like any other. When the check passes, FastAPI runs it again as a dependency;
`current_principal` keeps the caller on the request, so that costs nothing.

A route that reads its body itself (the dashboard's forms) needs none of this: its dependencies
run before its code does.

A route may also have a shortcut: what answers its most common requests once the caller is
checked, without FastAPI's handling of the body into the route's parameters (the ingest routes'
valid snapshots). `EarlyAnswers` offers such a request to the shortcut before FastAPI's
exception handling, routing and route handling, which cost a visible share of a snapshot's
CPU: it sits innermost among the middleware, so the request observer, the concurrency limit,
compression and the body limit see the request as they see any other. An exception the
shortcut raises is answered by the app's exception handlers, as the route's would be. Anything
else, and anything in doubt (a check that does not pass, the shortcut declining), goes on to
the app, which answers as it would have.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from devicedeck.web.limits import BodyNotRead

CallerCheck = Callable[[Request], Awaitable[Any]]
# Answers a request whose caller passed the checks, or leaves it to the route (None).
Shortcut = Callable[[Request], Awaitable[Response | None]]
Check = TypeVar("Check", bound=CallerCheck)

_CHECKS_BEFORE_BODY: set[Callable[..., Any]] = set()


def checked_before_body(check: Check) -> Check:
    """Marks a dependency that takes only the request and decides whether the caller may call
    the route at all; it must not read the body."""
    _CHECKS_BEFORE_BODY.add(check)
    return check


def marked_checks(dependant: Dependant) -> list[CallerCheck]:
    found: list[CallerCheck] = []
    for dependency in dependant.dependencies:
        if dependency.call in _CHECKS_BEFORE_BODY:
            found.append(dependency.call)
        found.extend(marked_checks(dependency))
    return found


class CallerFirstRoute(APIRoute):
    def shortcut(self) -> Shortcut | None:
        """What may answer a request once its caller is checked, before FastAPI reads the body
        into the route's parameters (`EarlyAnswers`); a subclass's, for requests common enough
        to be worth it."""
        return None

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        checks = marked_checks(self.dependant)
        if not checks:
            return handler

        async def caller_first(request: Request) -> Response:
            for check in checks:
                await check(request)
            return await handler(request)

        return caller_first


# A route with a shortcut: the route, its caller checks, its shortcut.
EarlyAnswer = tuple[CallerFirstRoute, list[CallerCheck], Shortcut]


class EarlyAnswers:
    """Innermost middleware: offers a request for a route with a shortcut to it before FastAPI
    handles the request, and hands the app the request, its body as read, when it declines."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._answers: dict[tuple[str, str], EarlyAnswer] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A root path would make the route's path another; the app matches that as it does.
        if scope["type"] != "http" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        if self._answers is None:
            self._answers = _early_answers(scope["app"].router.routes)
        found = self._answers.get((scope["method"], scope["path"]))
        if found is None:
            await self.app(scope, receive, send)
            return
        route, checks, shortcut = found
        request = Request(scope, receive)
        try:
            for check in checks:
                await check(request)
        except Exception:
            # Nothing is read yet: the route runs the check again, and answers as it does.
            await self.app(scope, receive, send)
            return
        try:
            body = await request.body()
        except BodyNotRead:
            return  # the body limit has answered
        except ClientDisconnect:
            await self.app(scope, receive, send)  # which meets the disconnect as it would have
            return
        try:
            answer = await shortcut(request)
        except Exception as error:
            handler = _exception_handler(scope["app"], error)
            if handler is None:
                raise  # to the server's error handler, as from the route
            if inspect.iscoroutinefunction(handler):
                answer = await handler(request, error)
            else:
                answer = await run_in_threadpool(handler, request, error)
        if answer is None:
            await self.app(scope, _replay(body, receive), send)
            return
        scope["route"] = route  # the route that answered, as routing would name it
        await answer(scope, receive, send)


def _early_answers(routes: Sequence[BaseRoute]) -> dict[tuple[str, str], EarlyAnswer]:
    answers: dict[tuple[str, str], EarlyAnswer] = {}
    for context in iter_route_contexts(routes):
        route, path = context.original_route, context.path
        # A path with parameters is for routing to match.
        if not isinstance(route, CallerFirstRoute) or not isinstance(path, str) or "{" in path:
            continue
        shortcut = route.shortcut()
        if shortcut is not None:
            for method in context.methods or ():
                answers.setdefault(
                    (method, path), (route, marked_checks(route.dependant), shortcut)
                )
    return answers


def _exception_handler(app: Any, error: Exception) -> Callable[..., Any] | None:
    """The handler the app's exception handling inside the middleware gives `error`: by its
    status for an HTTP error, else by its nearest class. The server's error handler (500,
    Exception) is outside the middleware, and meets what this leaves as it meets the route's."""
    handlers: dict[Any, Callable[..., Any]] = app.exception_handlers
    if isinstance(error, HTTPException) and error.status_code != 500:
        handler = handlers.get(error.status_code)
        if handler is not None:
            return handler
    for kind in type(error).__mro__:
        if kind is not Exception and kind in handlers:
            return handlers[kind]
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """The request's receive, with the body, read already, first."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
