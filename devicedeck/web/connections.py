"""Limits on connections, below the app: how long a request's headers may take, and how many
connections one client address may hold open.

The app's limits (devicedeck/web/limits.py) start once a request's headers are complete;
until then a connection is only the server's. uvicorn closes a connection idle between
requests, but not one that has begun a request and never finishes its headers, so a client
could hold sockets (file descriptors) open for as long as it liked, and enough of them starve
the probes as well as everything else. This protocol, uvicorn's own HTTP protocol with both
limits added, is what `devicedeck serve` runs.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def _plain_answer(status: bytes, text: bytes, *headers: bytes) -> bytes:
    """A whole HTTP answer, written straight to the socket: the app never sees these
    connections."""
    head = [
        b"HTTP/1.1 " + status,
        b"content-type: text/plain; charset=utf-8",
        *headers,
        b"content-length: " + str(len(text)).encode(),
        b"connection: close",
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + text


HEADERS_TOO_SLOW = _plain_answer(
    b"408 Request Timeout", b"the request's headers did not arrive in time\n"
)
TOO_MANY_CONNECTIONS = _plain_answer(
    b"429 Too Many Requests",
    b"too many connections are open from this address\n",
    b"retry-after: 1",
)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol with a deadline for each request's headers and a cap on the
    connections open from one client address, both per serving process.

    The limits are class attributes, set by `configure` in each serving process before it
    accepts connections: uvicorn builds a protocol per connection from the class alone.
    """

    header_timeout: ClassVar[float] = 10.0
    max_per_client: ClassVar[int] = 0  # 0: no cap
    open_per_client: ClassVar[Counter[str]] = Counter()

    @classmethod
    def configure(cls, header_timeout: float, max_per_client: int) -> None:
        cls.header_timeout = header_timeout
        cls.max_per_client = max_per_client

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._counted: str | None = None
        # Whether a request has begun whose headers are not complete yet.
        self._in_headers = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else None
        if address is not None and self.max_per_client:
            if self.open_per_client[address] >= self.max_per_client:
                transport.write(TOO_MANY_CONNECTIONS)
                transport.close()
                return
            self.open_per_client[address] += 1
            self._counted = address
        # From the first byte the connection may be silent for uvicorn's keep-alive timeout,
        # and no longer than this for its first request's headers.
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        if self._counted is not None:
            self.open_per_client[self._counted] -= 1
            if self.open_per_client[self._counted] <= 0:
                del self.open_per_client[self._counted]
            self._counted = None
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers = True
        self._arm_header_deadline()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._disarm_header_deadline()
        super().on_headers_complete()

    def _arm_header_deadline(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(
                self.header_timeout, self._headers_too_slow
            )

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self.transport.is_closing():
            return
        # A connection that never began a request is closed without an answer, as an idle
        # one is: a client could take an answer there for one to a request it sends next.
        if self._in_headers:
            self.transport.write(HEADERS_TOO_SLOW)
        self.transport.close()
