"""GET /ui/stream: the one Server-Sent Events connection each dashboard tab keeps open.

It carries no data, only "something changed, up to event N" (`event: changed`, `id: N`); the
page then asks for its regions and swaps the ones that differ. The stream ends when the client
goes away, the service shuts down, or its token or dashboard session is over
(devicedeck/ui/stream_limits.py, which also caps how many one caller may hold open). FastAPI's
EventSourceResponse does the framing, sends a keep-alive comment after 15 s of silence (so
proxies keep an idle stream open and dead clients are found), and stops the generator when the
client disconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from devicedeck.ui.access import Viewer
from devicedeck.ui.live import CLOSED, LiveHub
from devicedeck.ui.stream_limits import LiveStreams, StreamSlot, TooManyStreams, owner_of

router = APIRouter(include_in_schema=False)

RETRY_MS = 2000
# After telling a tab that something changed, wait this long before telling it again: each
# message costs the tab a refresh, and at a busy cluster's churn changes come every second.
# What changed meanwhile is not lost: the queue keeps the newest event id.
PACE_SECONDS = 3.0


def open_hub(request: Request) -> LiveHub:
    """The hub to subscribe to; 503 once it has closed (the service is shutting down)."""
    hub: LiveHub = request.app.state.live
    if hub.closed.is_set():
        raise HTTPException(503, "shutting down", headers={"Retry-After": "2"})
    return hub


def changed_event(latest: int) -> ServerSentEvent:
    return ServerSentEvent(event="changed", id=str(latest), raw_data=str(latest))


async def stream_slot(request: Request, viewer: Viewer) -> AsyncIterator[StreamSlot]:
    """A place among the caller's open streams, held until the stream has ended (a
    dependency's teardown runs after the response), or 429 when all are taken."""
    streams: LiveStreams = request.app.state.live_streams
    owner = owner_of(viewer, request.client.host if request.client else None)
    with contextlib.ExitStack() as stack:
        try:
            slot = stack.enter_context(streams.hold(owner))
        except TooManyStreams as e:
            raise HTTPException(429, str(e), headers={"Retry-After": "30"}) from e
        yield slot


@router.get("/ui/stream", response_class=EventSourceResponse)
async def stream(
    request: Request,
    hub: Annotated[LiveHub, Depends(open_hub)],
    slot: Annotated[StreamSlot, Depends(stream_slot)],
) -> AsyncIterator[ServerSentEvent]:
    sent = _since(request)
    async with hub.subscribe() as queue:
        # Revoking the token or ending the session wakes the queue with CLOSED too.
        slot.attach(queue)
        yield ServerSentEvent(retry=RETRY_MS)
        if hub.latest > sent:
            sent = hub.latest
            yield changed_event(sent)
        while (latest := await queue.get()) != CLOSED:
            if latest > sent:
                sent = latest
                yield changed_event(latest)
                await _pause(hub)


async def _pause(hub: LiveHub) -> None:
    """PACE_SECONDS, cut short when the hub closes (the service is shutting down)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(hub.closed.wait(), PACE_SECONDS)


def _since(request: Request) -> int:
    """Where the page's data stands: Last-Event-ID on a reconnect, else ?since= from the page."""
    for value in (request.headers.get("last-event-id"), request.query_params.get("since")):
        if value and value.isdigit() and len(value) < 19:
            return int(value)
    return 0
