"""The HTML pages (contract §6), outside the prefix: sign-in, sign-up, the account page, and
the pages the mailed links open. Server-rendered with Jinja2; off with `AUTHGATE_PAGES=off`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter

if TYPE_CHECKING:
    from authgate.app import AuthGate

__all__ = ["pages_router"]


def pages_router(gate: AuthGate) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    return router
