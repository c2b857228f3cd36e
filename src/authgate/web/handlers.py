"""Every error the HTTP edge answers, in one body shape: `{"detail": ..., "code": ...}`.

Errors carry their own wire format (`errors.py`); these handlers only render it. The two
exceptions are validation errors, which keep FastAPI's 422 shape less what echoes the input,
and the database or the cache being away, which is a 503, never a 500.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from limits.errors import StorageError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from authgate.errors import AuthError, PasswordRejected, ServiceUnavailable
from authgate.store.errors import DATABASE_ERROR, DATABASE_UNAVAILABLE, refused_by_database

__all__ = ["error_response", "install_error_handlers", "rejected_password"]

logger = logging.getLogger("authgate")

_STATUS_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
}
# Errors of the database or the cache being away: 503, never 500.
_UNAVAILABLE = (
    *DATABASE_UNAVAILABLE,
    OSError,
    TimeoutError,
    RedisConnectionError,
    RedisTimeoutError,
    StorageError,
)


def error_response(
    status: int, detail: str, code: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    out = dict(headers or {})
    if status == 401:
        out.setdefault("WWW-Authenticate", "Bearer")
    return JSONResponse({"detail": detail, "code": code}, status_code=status, headers=out)


def rejected_password(field: str, exc: PasswordRejected) -> RequestValidationError:
    """The service's refusal of a new password as the 422 the request body's validation gave
    when the rule sat in the schema: the same item, at the same place, with the same text."""
    return RequestValidationError(
        [{"type": "value_error", "loc": ("body", field), "msg": f"Value error, {exc.detail}"}]
    )


def install_error_handlers(app: FastAPI) -> None:
    async def on_auth_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, AuthError)
        headers: dict[str, str] = {}
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            headers["Retry-After"] = str(retry_after)
        return error_response(exc.status_code, exc.detail, exc.code, headers)

    async def on_http_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _STATUS_CODES.get(exc.status_code, "error")
        detail = exc.detail if isinstance(exc.detail, str) else "Request failed."
        return error_response(exc.status_code, detail, code, dict(exc.headers or {}))

    async def on_validation_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        # FastAPI's shape, less `input` and `ctx`: they echo what was sent, passwords too.
        errors = [
            {"type": e.get("type"), "loc": list(e.get("loc", ())), "msg": e.get("msg")}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": errors}, status_code=422)

    async def on_unavailable(_request: Request, exc: Exception) -> JSONResponse:
        if refused_by_database(exc):
            return await on_unexpected(_request, exc)
        logger.error("dependency unavailable: %s", type(exc).__name__)
        err = ServiceUnavailable()
        return error_response(
            err.status_code, err.detail, err.code, {"Retry-After": str(err.retry_after)}
        )

    async def on_unexpected(_request: Request, exc: Exception) -> JSONResponse:
        logger.error("unhandled %s", type(exc).__name__, exc_info=exc)
        return error_response(500, "Internal server error.", "internal_error")

    app.add_exception_handler(AuthError, on_auth_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    for exc_type in (*_UNAVAILABLE, DATABASE_ERROR):
        app.add_exception_handler(exc_type, on_unavailable)
    app.add_exception_handler(Exception, on_unexpected)
