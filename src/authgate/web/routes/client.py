"""The browser client (contract §7): `{prefix}/client.js`, a dependency-free ES module, and
`{prefix}/client.d.ts` beside it, served from `web/static/`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = ["client_router"]


def client_router(gate: AuthGate) -> APIRouter:
    router = APIRouter(prefix=gate.config.prefix, include_in_schema=False)
    return router
