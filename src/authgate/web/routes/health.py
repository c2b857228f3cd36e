"""What operators and other services ask: liveness, readiness, and the JWKS."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from authgate.web.schemas import HealthResponse, ReadinessResponse

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = ["health_router"]

READINESS_TIMEOUT_S = 2.0


def health_router(gate: AuthGate) -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get("/.well-known/jwks.json", tags=["keys"])
    async def jwks() -> Any:
        """Public keys of the access-token signatures (empty with HS256)."""
        return JSONResponse(
            gate.services.keys.jwks(), headers={"Cache-Control": "public, max-age=300"}
        )

    @router.get("/health", response_model=HealthResponse)
    async def health() -> Any:
        return HealthResponse()

    @router.get(
        "/readiness",
        response_model=ReadinessResponse,
        responses={503: {"model": ReadinessResponse}},
    )
    async def readiness() -> Any:
        probes = {}
        if gate.config.database_url is not None:
            probes["database"] = gate.services.db.ping
        if gate.config.cache_url is not None:
            probes["cache"] = gate.cache.ping
        names = list(probes)
        results = await asyncio.gather(*(_check(probes[name]) for name in names))
        checks = dict(zip(names, results, strict=True))
        ok = all(c["status"] == "ok" for c in checks.values())
        return JSONResponse(
            {"status": "ok" if ok else "unavailable", "checks": checks},
            status_code=200 if ok else 503,
            headers={"Cache-Control": "no-store"},
        )

    return router


async def _check(probe: Any) -> dict[str, Any]:
    started = time.perf_counter()
    error: str | None = None
    try:
        await asyncio.wait_for(probe(), timeout=READINESS_TIMEOUT_S)
    except TimeoutError:
        error = "timed out after 2 s"
    except Exception as exc:
        # The exception's type only: a driver message could quote the URL and its password.
        error = type(exc).__name__
    result: dict[str, Any] = {
        "status": "ok" if error is None else "error",
        "latency_ms": round((time.perf_counter() - started) * 1000, 1),
    }
    if error is not None:
        result["error"] = error
    return result
