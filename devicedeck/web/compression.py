"""gzip for pages and JSON when the client accepts it, never for the event stream or ingest.

The dashboard's pages and live refreshes are repetitive HTML that shrinks about tenfold. The
event stream must reach the browser as each event is written, which a compressor would hold
back; ingest answers are a few bytes, and ingest is the path whose CPU per request counts.
"""

from __future__ import annotations

from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

UNCOMPRESSED_PREFIXES = ("/api/v1/ingest/", "/ui/stream", "/livez", "/readyz", "/metrics")
MINIMUM_SIZE = 1024


class CompressionMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=MINIMUM_SIZE, compresslevel=6)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith(UNCOMPRESSED_PREFIXES):
            await self.gzip(scope, receive, send)
        else:
            await self.app(scope, receive, send)
