"""Errors answered as the API server answers them: a Status object with a code and reason."""

from __future__ import annotations

from typing import Any

GENERIC_INVALID = "the server rejected our request due to an error in our request"


class ApiError(Exception):
    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _about(code: int, reason: str, plural: str, name: str, group: str, message: str) -> ApiError:
    """An error about one named object, its Status naming it in `details`."""
    details = {"name": name, "kind": plural} | ({"group": group} if group else {})
    return ApiError(code, reason, message, details)


def _resource(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, name: str, group: str = "") -> ApiError:
    message = f'{_resource(plural, group)} "{name}" not found'
    return _about(404, "NotFound", plural, name, group, message)


def already_exists(plural: str, name: str, group: str = "") -> ApiError:
    message = f'{_resource(plural, group)} "{name}" already exists'
    return _about(409, "AlreadyExists", plural, name, group, message)


def conflict(plural: str, name: str, why: str, group: str = "") -> ApiError:
    message = f'Operation cannot be fulfilled on {_resource(plural, group)} "{name}": {why}'
    return _about(409, "Conflict", plural, name, group, message)


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(kind: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid with one cause per (field, message), as field validation reports it."""
    text = "; ".join(f"{field}: {message}" for field, message in causes)
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {text}',
        {
            "name": name,
            "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": message, "field": field}
                for field, message in causes
            ],
        },
    )


def patch_failed(message: str) -> ApiError:
    """A patch that cannot be applied: 422 with the patch library's error as the cause."""
    return ApiError(
        422,
        "Invalid",
        GENERIC_INVALID,
        {"causes": [{"reason": "UnexpectedServerResponse", "message": message}]},
    )
