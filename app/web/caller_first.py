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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

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
        into the route's parameters; a subclass's, for requests common enough to be worth it."""
        return None

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        checks = marked_checks(self.dependant)
        if not checks:
            return handler
        shortcut = self.shortcut()

        async def caller_first(request: Request) -> Response:
            for check in checks:
                await check(request)
            if shortcut is not None:
                answer = await shortcut(request)
                if answer is not None:
                    return answer
            return await handler(request)

        return caller_first
