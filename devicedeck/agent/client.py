"""HTTP to the service: post one snapshot and say what the answer means for the agent.

Every answer maps to one Outcome; nothing the service (or something in front of it) sends
back raises. A 2xx whose body is not the ingest result is treated like a failure, since the
agent cannot tell whether the snapshot was applied; re-sending is always safe.
"""

from __future__ import annotations

import enum
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from devicedeck import __version__
from devicedeck.agent.token import TokenSource

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 5.0
REQUEST_TIMEOUT_SECONDS = 15.0


class Outcome(enum.Enum):
    ACCEPTED = "accepted"
    # 409: the service is further along this stream than this boot_id; start a new one.
    STALE = "stale"
    # 401/403: the token is missing, wrong, revoked or lacks the ingest scope.
    UNAUTHORIZED = "unauthorized"
    # Other 4xx: the service refuses this content; sending it again would not help.
    REJECTED = "rejected"
    # 5xx, 429, transport errors, unreadable answers: try again later.
    RETRY = "retry"


@dataclass(frozen=True)
class PushResult:
    outcome: Outcome
    status: int | None = None
    detail: str = ""
    changed: bool = False

    @property
    def reason(self) -> str:
        """A short label for metrics."""
        if self.outcome is Outcome.RETRY:
            if self.status is None:
                return "transport"
            if self.status >= 500:
                return "server_error"
            return "throttled" if self.status == 429 else "bad_response"
        return self.outcome.value


def _error_text(response: httpx.Response) -> str:
    """The message of the API's error shape, or the start of whatever came back."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        details = error.get("details") or []
        fields = ", ".join(
            f"{d.get('field')}: {d.get('message')}" for d in details if isinstance(d, dict)
        )
        message = str(error.get("message", ""))
        return f"{message} ({fields})" if fields else message
    return str(body)[:200]


def trusting(ca_file: Path | None) -> ssl.SSLContext | bool:
    """What an https:// service's certificate is checked against: the CA certificates in
    `ca_file` (PEM), else the HTTP client's own bundle (True). Hostname and chain are always
    checked. A file that cannot be read or holds no certificate raises OSError (ssl.SSLError
    is one)."""
    if ca_file is None:
        return True
    return ssl.create_default_context(cafile=str(ca_file))


class IngestClient:
    def __init__(
        self,
        server: str,
        tokens: TokenSource,
        *,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        transport: httpx.BaseTransport | None = None,
        ca_file: Path | None = None,
    ) -> None:
        self.server = server
        self._tokens = tokens
        self._http = httpx.Client(
            base_url=server,
            timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_SECONDS),
            headers={"User-Agent": f"devicedeck-agent/{__version__}"},
            follow_redirects=False,
            transport=transport,
            verify=trusting(ca_file),
        )

    def close(self) -> None:
        self._http.close()

    def post(self, path: str, payload: dict[str, Any]) -> PushResult:
        headers = {}
        token = self._tokens.current()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            response = self._http.post(path, json=payload, headers=headers)
        except httpx.HTTPError as e:
            return PushResult(Outcome.RETRY, None, f"{type(e).__name__}: {e}")
        return self._interpret(response)

    @staticmethod
    def _interpret(response: httpx.Response) -> PushResult:
        status = response.status_code
        if 200 <= status < 300:
            try:
                body = response.json()
            except ValueError:
                return PushResult(Outcome.RETRY, status, "answer is not JSON")
            if not isinstance(body, dict) or not isinstance(body.get("changed"), bool):
                return PushResult(Outcome.RETRY, status, "answer is not an ingest result")
            return PushResult(Outcome.ACCEPTED, status, changed=body["changed"])
        detail = _error_text(response)
        if status == 409:
            return PushResult(Outcome.STALE, status, detail)
        if status in (401, 403):
            return PushResult(Outcome.UNAUTHORIZED, status, detail)
        if 400 <= status < 500 and status not in (408, 429):
            return PushResult(Outcome.REJECTED, status, detail)
        return PushResult(Outcome.RETRY, status, detail)
