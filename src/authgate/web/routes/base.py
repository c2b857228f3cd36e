"""What every route module shares: the strict JSON route class and the response helpers."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from authgate.web.schemas import ErrorResponse

__all__ = ["NO_STORE", "StrictJsonRoute", "error_responses", "no_store"]

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


class StrictJsonRequest(Request):
    """JSON bodies with a key given twice are refused, not resolved by "last one wins"."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            self._json = json.loads(body, object_pairs_hook=_unique_keys)
        return self._json


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            # A JSONDecodeError, so FastAPI answers its usual 422 json_invalid.
            raise json.JSONDecodeError(f"duplicate key {key[:64]!r}", "", 0)
        out[key] = value
    return out


class StrictJsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler  # nothing to parse: no second Request on GET /me

        async def strict(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` of the error codes a route may answer."""
    return {code: {"model": ErrorResponse} for code in codes}


def no_store(response: Response) -> None:
    response.headers.update(NO_STORE)
