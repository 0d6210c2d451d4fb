"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import text

from devicedeck.web.db_sessions import SessionFactory
from devicedeck.web.state import service_state

router = APIRouter(tags=["service"])


@router.get("/livez", operation_id="livez", summary="The process is up")
async def livez() -> dict[str, Any]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    operation_id="readyz",
    summary="The database answers",
    responses={503: {"description": "not ready"}},
)
def readyz(factory: SessionFactory) -> Response:
    try:
        with factory() as session:
            session.execute(text("SELECT 1"))
    except Exception as e:  # any failure to reach the database means not ready
        return JSONResponse(
            {
                "error": {
                    "code": "unavailable",
                    "message": f"database unreachable: {type(e).__name__}",
                    "details": [],
                }
            },
            status_code=503,
        )
    return JSONResponse({"status": "ok"})


@router.get(
    "/metrics", operation_id="metrics", summary="Prometheus metrics", response_class=Response
)
def metrics(request: Request) -> Response:
    body, content_type = service_state(request.app).metrics.render(request.headers.get("accept"))
    return Response(body, headers={"Content-Type": content_type, "Vary": "Accept"})
