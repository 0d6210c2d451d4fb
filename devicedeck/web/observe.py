"""Every request counted and timed by its route template (`/api/v1/devices/{id}`, never the
raw path, so a scan of made-up URLs cannot grow the metrics without bound), and written to the
access log with who asked: the token's or user's name, never the token."""

from __future__ import annotations

import logging
import re
import time

from fastapi.routing import iter_route_contexts
from starlette.routing import BaseRoute, Mount, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from devicedeck.runtime.metrics import ServiceMetrics

access_log = logging.getLogger("devicedeck.access")

UNMATCHED = "unmatched"
# Where the principal check leaves the caller's name, in the request's state.
PRINCIPAL_KEY = "principal_name"
# The dashboard's route for every path no other route has (devicedeck/ui/routes/missing.py).
CATCH_ALL = "/{path}"
EVENT_STREAM = b"text/event-stream"


class RouteTemplates:
    """Names a request by the template of the route that answered it. The dashboard's
    catch-all answers every path no other route has (`unmatched`) and the paths other routes
    take with other methods (named by those routes); a request refused before routing (a
    body over the limit) is named by the route it was sent to."""

    def __init__(self) -> None:
        self._patterns: list[tuple[re.Pattern[str], str, frozenset[str] | None]] | None = None

    def of(self, scope: Scope) -> str:
        route = scope.get("route")
        template = getattr(route, "path_format", None)
        if isinstance(template, str) and template != CATCH_ALL:
            return template
        return self._match(scope)

    def _match(self, scope: Scope) -> str:
        if self._patterns is None:
            self._patterns = _patterns(scope["app"].router.routes)
        path, method = scope["path"], scope["method"]
        other_method = None
        for pattern, template, methods in self._patterns:
            if pattern.match(path):
                if methods is None or method in methods:
                    return template
                other_method = other_method or template
        return other_method or UNMATCHED


def _patterns(
    routes: list[BaseRoute],
) -> list[tuple[re.Pattern[str], str, frozenset[str] | None]]:
    found = []
    for context in iter_route_contexts(routes):
        template, path = context.path_format, context.path
        if not isinstance(template, str) or not isinstance(path, str) or template == CATCH_ALL:
            continue
        if isinstance(context.original_route, Mount):
            path += "/{path:path}"
        methods = context.methods
        found.append(
            (compile_path(path)[0], template, frozenset(methods) if methods is not None else None)
        )
    return found


class RequestObserver:
    """Outermost middleware: sees every answer, including those of the other middleware."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, access: bool = True) -> None:
        self.app = app
        self.metrics = metrics
        self.access = access
        self.templates = RouteTemplates()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # unless an answer starts: an exception escapes to the server's handler
        streamed = False

        async def observe(message: Message) -> None:
            nonlocal status, streamed
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", ()):
                    if name.lower() == b"content-type":
                        streamed = value.startswith(EVENT_STREAM)
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:
            elapsed = time.perf_counter() - started
            route = self.templates.of(scope)
            method = scope["method"]
            self.metrics.http_requests.labels(route, method, str(status)).inc()
            if not streamed:
                self.metrics.http_seconds.labels(route, method).observe(elapsed)
            if self.access and access_log.isEnabledFor(logging.INFO):
                access_log.info(
                    "request",
                    extra={
                        "event": "request",
                        "method": method,
                        "route": route,
                        "status": status,
                        "duration_ms": round(elapsed * 1000, 1),
                        "principal": scope.get("state", {}).get(PRINCIPAL_KEY),
                    },
                )
