"""Errors of the Kubernetes integration, each with the HTTP status the API answers with."""

from __future__ import annotations

from devicedeck.inventory.errors import DomainError, Problem

KUBE_OFF_MESSAGE = (
    "the Kubernetes integration is off (DEVICEDECK_KUBE is off); set DEVICEDECK_KUBE=incluster "
    "or DEVICEDECK_KUBE=kubeconfig with DEVICEDECK_KUBECONFIG=PATH to change node status"
)


class KubeError(DomainError):
    """Something the API server said or could not say; `status` is what our API answers."""

    status: int | None = 503

    def __init__(self, message: str, problems: list[Problem] | None = None, status: int = 0):
        super().__init__(message, problems)
        if status:
            self.status = status


class KubeUnavailable(KubeError):
    """The integration is off, its configuration failed, or the API server cannot be reached."""

    code = "unavailable"
    status = 503


class KubeRefused(KubeError):
    """The API server answered the request with an error Status."""

    code = "api_server_refused"


class ApiStatus(Exception):
    """A Status object from the API server, raised by list and watch calls."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message

    @property
    def gone(self) -> bool:
        return self.code == 410


class ApiUnreachable(Exception):
    """No HTTP answer: connection refused, reset, timed out, or a broken stream."""
