"""`GET /metrics` at the root (contract §10): Prometheus text format, summed over every worker.

Mounted only with `AUTHGATE_METRICS=on` (the default); off, the path is a plain 404. With
`AUTHGATE_METRICS_TOKEN` set, it needs `Authorization: Bearer <that token>`: none is 401, any
other value 403. The token is kept only as its SHA-256 digest and compared with
`hmac.compare_digest` on digests (constant time, no length signal); it is never logged.

Left out of the OpenAPI document: it is for Prometheus, not for API clients, and its body is
not JSON. `Cache-Control: no-store`: a scrape is a reading of now, never to be replayed.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from authgate.errors import Forbidden, NotAuthenticated
from authgate.metrics import Metrics, exposition
from authgate.web.routes.base import NO_STORE

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = ["metrics_router"]


def metrics_router(gate: AuthGate, metrics: Metrics) -> APIRouter:
    router = APIRouter()
    secret = gate.config.metrics_token
    digest = hashlib.sha256(secret.get_secret_value().encode()).digest() if secret else None

    @router.get("/metrics", include_in_schema=False)
    async def scrape(request: Request) -> Response:
        if digest is not None:
            scheme, _, value = request.headers.get("authorization", "").partition(" ")
            value = value.strip()
            if scheme.lower() != "bearer" or not value:
                raise NotAuthenticated()
            if not hmac.compare_digest(hashlib.sha256(value.encode()).digest(), digest):
                raise Forbidden("Wrong metrics token.")
        metrics.flush()  # this worker's latest requests, on the loop that counted them
        # On a thread: in multiprocess mode this reads every worker's files.
        body, content_type = await run_in_threadpool(exposition, metrics)
        return Response(body, media_type=content_type, headers=NO_STORE)

    return router
