"""mfa routes (contract §9)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter

from authgate.web.routes.base import StrictJsonRoute

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = ["mfa_router"]


def mfa_router(gate: AuthGate) -> APIRouter:
    router = APIRouter(
        prefix=gate.config.prefix, tags=["second factors"], route_class=StrictJsonRoute
    )
    return router
