"""Errors as answers: one status per domain error, and one shape for each audience.

Under /api (and the service's own endpoints) an error is the API's JSON shape,
{"error": {"code", "message", "details"}}. On a dashboard page it is the dashboard's HTML
error page, which the dashboard installs as the app's `ErrorPage`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from devicedeck.inventory.errors import (
    ConflictingRepeat,
    DomainError,
    InvalidInput,
    NotFound,
    StaleSnapshot,
)
from devicedeck.web.state import service_state

log = logging.getLogger(__name__)

STATUS_BY_ERROR: dict[type[DomainError], int] = {
    InvalidInput: 422,
    StaleSnapshot: 409,
    ConflictingRepeat: 409,
    NotFound: 404,
}


def status_of(error: DomainError) -> int:
    """The error's own status if it carries one, else its kind's (or its nearest base's)."""
    if error.status is not None:
        return error.status
    for kind in type(error).__mro__:
        if kind in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[kind]
    return 400


class ErrorPage(Protocol):
    """Renders an error for a person looking at a page; None when the path is not a page."""

    def __call__(
        self,
        request: Request,
        status: int,
        message: str,
        details: list[dict[str, Any]],
        headers: Mapping[str, str] | None,
    ) -> Response | None: ...


# What FastAPI raises (as a 400) when it cannot decode a request body at all.
FASTAPI_BODY_PARSE_ERROR = "There was an error parsing the body"

HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
}


def error_body(code: str, message: str, details: list[dict[str, Any]] | None = None) -> dict:
    return {"error": {"code": code, "message": message, "details": details or []}}


def error_response(
    status: int,
    code: str,
    message: str,
    details: list[dict[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(code, message, details), status_code=status, headers=headers)


def field_path(loc: tuple[Any, ...]) -> str:
    """('body', 'devices', 3, 'ID') -> 'devices[3].ID'; query and path params keep their name."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


def validation_details(errors: list[dict[str, Any]]) -> list[dict[str, str]]:
    details = []
    for err in errors:
        loc = tuple(err.get("loc", ()))
        # Tagged unions and function validators add their own names to loc; drop them.
        loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith("function-")))
        if err.get("type") == "json_invalid":
            # Its loc ends with the byte offset of the syntax error, not a field.
            loc = ("body",)
        rule, message = str(err.get("type", "invalid")), err["msg"]
        if rule == "string_unicode":
            # pydantic's own check of a constrained string: the same rule as every other field.
            rule, message = "utf8", "must be valid Unicode text (no lone UTF-16 surrogates)"
        details.append({"field": field_path(loc), "rule": rule, "message": message})
    return details


JSON_MEDIA_TYPE = "application/json"


def _is_json(content_type: str | None) -> bool:
    media_type = (content_type or "").partition(";")[0].strip().lower()
    return media_type == JSON_MEDIA_TYPE or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def _body_not_sent_as_json(content_type: str | None, errors: list[dict[str, Any]]) -> bool:
    """A body sent without a JSON Content-Type (curl -d sends a form unless told otherwise) is
    not parsed, and fails as "not an object": worth a clearer answer."""
    return not _is_json(content_type) and any(
        tuple(err.get("loc", ())) == ("body",) and err.get("type") != "missing" for err in errors
    )


def _not_json_response(sent: str | None) -> JSONResponse:
    message = f"must be {JSON_MEDIA_TYPE}, not {sent!r}" if sent else f"must be {JSON_MEDIA_TYPE}"
    return error_response(
        415,
        "unsupported_media_type",
        f"the body must be JSON, sent with Content-Type: {JSON_MEDIA_TYPE}",
        [{"field": "content-type", "rule": "media_type", "message": message}],
    )


def _answer(
    request: Request,
    status: int,
    code: str,
    message: str,
    details: list[dict[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    page = service_state(request.app).error_page
    if page is not None:
        rendered = page(request, status, message, details or [], headers)
        if rendered is not None:
            return rendered
    return error_response(status, code, message, details, headers)


def _unavailable(request: Request) -> Response:
    return _answer(
        request,
        503,
        "unavailable",
        "the database could not serve this request; nothing was changed, try again",
        headers={"Retry-After": "1"},
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        errors = list(exc.errors())
        content_type = request.headers.get("content-type")
        if _body_not_sent_as_json(content_type, errors):
            return _not_json_response(content_type)
        details = validation_details(errors)
        summary = "; ".join(f"{d['field']}: {d['message']}" for d in details[:3])
        return _answer(request, 422, "invalid_input", f"invalid input: {summary}", details)

    @app.exception_handler(DomainError)
    async def _domain(request: Request, exc: DomainError) -> Response:
        details = [p.as_dict() for p in exc.problems]
        return _answer(request, status_of(exc), exc.code, exc.message, details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and exc.detail == FASTAPI_BODY_PARSE_ERROR:
            # Not UTF-8, nested too deep, a number too long: invalid JSON like any other.
            message = "could not be parsed as a JSON document in UTF-8"
            details = [{"field": "body", "rule": "json_invalid", "message": message}]
            return error_response(422, "invalid_input", f"invalid input: body {message}", details)
        code = HTTP_CODES.get(exc.status_code, "error")
        detail = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return _answer(request, exc.status_code, code, detail, headers=exc.headers)

    @app.exception_handler(OperationalError)
    async def _database_unavailable(request: Request, exc: OperationalError) -> Response:
        # The database is down, restarting, or gave up on this transaction: nothing was
        # changed, and the same request may well succeed when sent again.
        log.warning(
            "database error",
            extra={
                "event": "database_error",
                "method": request.method,
                "path": request.url.path,
                "error": type(exc.orig).__name__,
            },
        )
        return _unavailable(request)

    @app.exception_handler(PoolTimeout)
    async def _no_free_connection(request: Request, exc: PoolTimeout) -> Response:
        # More requests at once than the service has database connections for, for longer
        # than the pool waits: an overload, which the same request sent later gets past.
        log.warning(
            "no free database connection",
            extra={"event": "database_busy", "method": request.method, "path": request.url.path},
        )
        return _unavailable(request)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception(
            "unhandled error",
            extra={"event": "unhandled_error", "method": request.method, "path": request.url.path},
        )
        # A page that failed (in a query or in its template) is still answered as a page.
        return _answer(request, 500, "internal_error", "internal error; see the service log")
