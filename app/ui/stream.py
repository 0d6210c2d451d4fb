"""GET /ui/stream: the one Server-Sent Events connection each dashboard tab keeps open.

It carries no data, only "something changed, up to event N" (`event: changed`, `id: N`); the
page then asks for its regions and swaps the ones that differ. The stream ends when the client
goes away or the service shuts down.
"""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

from app.ui.access import Viewer
from app.ui.live import CLOSED, LiveHub

router = APIRouter(include_in_schema=False)

KEEPALIVE = 15.0
RETRY_MS = 2000


def changed_message(latest: int) -> bytes:
    return f"id: {latest}\nevent: changed\ndata: {latest}\n\n".encode()


class EventStreamResponse(Response):
    """A raw ASGI response: sends until the hub closes, stops when the client disconnects."""

    media_type = "text/event-stream"

    def __init__(self, hub: LiveHub, since: int) -> None:
        super().__init__(
            status_code=200,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            media_type=self.media_type,
        )
        # A stream has no length; Response would otherwise declare an empty body.
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.hub = hub
        self.since = since

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        sender = asyncio.ensure_future(self._send_events(send))
        watcher = asyncio.ensure_future(_wait_for_disconnect(receive))
        try:
            await asyncio.wait({sender, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sender, watcher):
                task.cancel()
            for task in (sender, watcher):
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await task
        if sender.done() and not sender.cancelled() and sender.exception() is None:
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_events(self, send: Send) -> None:
        hub = self.hub
        async with hub.subscribe() as queue:
            await send(_body(f"retry: {RETRY_MS}\n\n".encode()))
            sent = self.since
            if hub.latest > sent:
                sent = hub.latest
                await send(_body(changed_message(sent)))
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE):
                        latest = await queue.get()
                except TimeoutError:
                    # Keeps proxies from closing an idle stream, and finds dead clients.
                    await send(_body(b": keepalive\n\n"))
                    continue
                if latest == CLOSED:
                    return
                if latest > sent:
                    sent = latest
                    await send(_body(changed_message(latest)))


def _body(chunk: bytes) -> dict[str, object]:
    return {"type": "http.response.body", "body": chunk, "more_body": True}


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


@router.get("/ui/stream")
def stream(request: Request, _viewer: Viewer) -> Response:
    hub: LiveHub = request.app.state.live
    if hub.closed.is_set():
        return Response("shutting down", status_code=503, headers={"Retry-After": "2"})
    since = _since(request)
    return EventStreamResponse(hub, since)


def _since(request: Request) -> int:
    """Where the page's data stands: Last-Event-ID on a reconnect, else ?since= from the page."""
    for value in (request.headers.get("last-event-id"), request.query_params.get("since")):
        if value and value.isdigit() and len(value) < 19:
            return int(value)
    return 0
