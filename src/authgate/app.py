"""The composition root: builds every resource from one `AuthConfig` and wires them into a
FastAPI application, standalone (`create_app`) or mounted in an existing one (`AuthGate`)."""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import logging
import re
import secrets
from collections.abc import AsyncIterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from ipaddress import IPv4Network, IPv6Network
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse
from limits.errors import StorageError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from authgate import events
from authgate.cache.base import Cache, RedisCache, open_cache
from authgate.cache.ratelimit import Limits, RateLimiter
from authgate.cache.state import SWEEP_MARGIN, StateCache
from authgate.config import AuthConfig
from authgate.datadir import ensure_secret_key
from authgate.errors import AuthError, PayloadTooLarge, ServiceUnavailable
from authgate.factors.passwords import PasswordHashing, common_passwords
from authgate.mail.delivery import make_senders
from authgate.services.accounts import AccountService
from authgate.services.context import Background, Clock, Services, utcnow
from authgate.services.sessions import SessionService
from authgate.store.db import Database, upgrade_schema
from authgate.store.limits import CounterStore, RedisCounters, SqlCounters
from authgate.store.sweep import DatabaseChanges
from authgate.tokens.jwks import load_signing_keys
from authgate.tokens.keys import Keys
from authgate.web.routes import auth_router, health_router
from authgate.web.transport import client_address, rate_limit_address

__all__ = ["AuthGate", "create_app"]

logger = logging.getLogger("authgate")

try:
    __version__ = version("authgate")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

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
_BODILESS = frozenset({"GET", "HEAD", "OPTIONS"})
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# Errors of the database or the cache being away: 503, never 500.
_UNAVAILABLE = (
    OperationalError,
    InterfaceError,
    PoolTimeoutError,
    OSError,
    TimeoutError,
    RedisConnectionError,
    RedisTimeoutError,
    StorageError,
)


class AuthGate:
    """authgate's resources and routes, ready to serve or to mount.

    >>> gate = AuthGate(AuthConfig())
    >>> app = FastAPI(lifespan=gate.lifespan)
    >>> gate.install(app)
    """

    def __init__(self, config: AuthConfig | None = None, *, clock: Clock = utcnow) -> None:
        self.config = ensure_secret_key(config or AuthConfig())
        cfg = self.config
        common_passwords()  # load the blocklist now, not during the first registration
        self.cache: Cache = open_cache(cfg.cache_url)
        db = Database(cfg)
        self.services = Services(
            config=cfg,
            db=db,
            keys=Keys(
                cfg.secret(),
                issuer=cfg.jwt_issuer,
                audience=cfg.jwt_audience,
                previous=cfg.previous_secrets(),
                signing=load_signing_keys(cfg),
            ),
            hashing=PasswordHashing(max_concurrency=cfg.hash_threads, max_wait=cfg.hash_max_wait),
            limiter=_rate_limiter(cfg, self.cache, db, clock),
            senders=make_senders(cfg),
            background=Background(),
            clock=clock,
            state_cache=(
                StateCache(
                    self.cache.client,
                    prefix=cfg.cache_prefix,
                    tombstone_ttl=cfg.access_ttl + 60,
                    # Swept from the database (revocations that never reached Redis); the
                    # margin covers a write's pool wait and statement (db_timeout each).
                    changes=DatabaseChanges(db, clock),
                    sweep_margin=max(SWEEP_MARGIN, 3 * cfg.db_timeout),
                )
                if isinstance(self.cache, RedisCache)
                else None
            ),
        )
        self.sessions = SessionService(self.services)
        self.accounts = AccountService(self.services)

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Any = None) -> AsyncIterator[None]:
        if self.config.embedded:
            logger.warning(
                "authgate is running on the embedded SQLite database in %s: "
                "a development setup; set DATABASE_URL and CACHE_URL in production",
                self.config.data_dir,
            )
        if self.config.auto_migrate:
            await upgrade_schema(self.services.db)
        state_cache = self.services.state_cache
        if state_cache is not None:
            await state_cache.start()
        try:
            yield
        finally:
            if state_cache is not None:
                await state_cache.stop()
            await self.services.background.drain()
            await self.cache.aclose()
            await self.services.db.dispose()

    def install(self, app: FastAPI) -> None:
        """Mount the auth routes, the health endpoints and the error handling on `app`."""
        app.state.authgate = self
        app.include_router(auth_router(self))
        app.include_router(health_router(self))
        install_error_handlers(app)
        origins = [o.strip() for o in self.config.cors_origins.split(",") if o.strip()]
        if origins:
            # Exact origins only, never reflected: cookies ride along with these requests.
            app.add_middleware(
                CORSMiddleware,
                allow_origins=origins,
                allow_credentials=True,
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "X-CSRF-Token", "X-Request-ID"],
                max_age=600,
            )
        app.add_middleware(
            RequestGuard,
            max_body_bytes=self.config.max_body_bytes,
            trusted_proxies=self.config.trusted_networks(),
        )


def _rate_limiter(cfg: AuthConfig, cache: Cache, db: Database, clock: Clock) -> RateLimiter:
    """Counters every worker and host shares: Redis with a cache, else the database."""
    store: CounterStore | None = None
    if cfg.rate_limits:
        store = (
            RedisCounters(cache.client, prefix=cfg.cache_prefix)
            if isinstance(cache, RedisCache)
            else SqlCounters(db)
        )
    return RateLimiter(
        store,
        Limits(
            login_per_ip=cfg.login_limit_per_ip,
            login_failures_per_account=cfg.login_failure_limit,
            login_failures_per_address=cfg.login_failure_limit_per_address,
            register_per_ip=cfg.register_limit_per_ip,
            reset_per_ip=cfg.reset_limit_per_ip,
            reset_per_account=cfg.reset_limit_per_account,
            verify_per_ip=cfg.verify_limit_per_ip,
        ),
        secret=cfg.secret(),
        clock=clock,
        address_key=functools.partial(rate_limit_address, v6_prefix=cfg.ipv6_rate_limit_prefix),
    )


def create_app(config: AuthConfig | None = None, *, clock: Clock = utcnow) -> FastAPI:
    """The standalone authgate application (what `authgate serve` runs)."""
    gate = AuthGate(config, clock=clock)
    app = FastAPI(
        title="authgate",
        version=__version__,
        description="Email-and-password authentication service.",
        lifespan=gate.lifespan,
        # FastAPI's pages load unpinned assets from a CDN; ours below pins them.
        docs_url=None,
        redoc_url=None,
    )
    gate.install(app)
    if gate.config.docs_enabled:
        _add_docs(app)
    return app


# /docs: Swagger UI from the CDN at one exact version, each file checked by the browser against
# its SRI digest (computed from the npm package swagger-ui-dist, which the CDN serves as it
# is), under a CSP that allows these two files, the inline start-up script by its digest, and
# requests to this origin only. The page shares its origin with the auth cookies: nothing
# else may run there. To move to another version, take the digests from its npm tarball:
#   openssl dgst -sha384 -binary package/swagger-ui-bundle.js | base64
SWAGGER_UI_VERSION = "5.35.0"
_SWAGGER_BASE = f"https://cdn.jsdelivr.net/npm/swagger-ui-dist@{SWAGGER_UI_VERSION}"
SWAGGER_UI_JS = (
    f"{_SWAGGER_BASE}/swagger-ui-bundle.js",
    "sha384-gjRm0bEPMeTmMh5jT2cHccIwCUZSTd8YC+j0d0sXw0MdGEfScduGpSyF3ZSSLkX9",
)
SWAGGER_UI_CSS = (
    f"{_SWAGGER_BASE}/swagger-ui.css",
    "sha384-WlYgdmXYOOBWL5apwjDEZwN+U3HmXSSu5R6V5aGxEcf7z+KuRNwBhoxKVN1i3D5I",
)


def _add_docs(app: FastAPI) -> None:
    openapi_url = json.dumps(app.openapi_url or "/openapi.json")
    start = (
        f"SwaggerUIBundle({{url: {openapi_url}, dom_id: '#swagger-ui', layout: 'BaseLayout', "
        "deepLinking: true, validatorUrl: null, queryConfigEnabled: false, "
        "presets: [SwaggerUIBundle.presets.apis]});"
    )
    start_digest = base64.b64encode(hashlib.sha256(start.encode()).digest()).decode()
    (js, js_sri), (css, css_sri) = SWAGGER_UI_JS, SWAGGER_UI_CSS
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>authgate: API documentation</title>\n"
        '<link rel="icon" href="data:,">\n'
        f'<link rel="stylesheet" href="{css}" integrity="{css_sri}" crossorigin="anonymous">\n'
        '</head>\n<body>\n<div id="swagger-ui"></div>\n'
        f'<script src="{js}" integrity="{js_sri}" crossorigin="anonymous"></script>\n'
        f"<script>{start}</script>\n</body>\n</html>\n"
    )
    headers = {
        "Content-Security-Policy": (
            f"default-src 'none'; script-src {js} 'sha256-{start_digest}'; "
            # Swagger UI sets style attributes on the elements it renders.
            f"style-src {css} 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        ),
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
    }

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)


def _error(
    status: int, detail: str, code: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    out = dict(headers or {})
    if status == 401:
        out.setdefault("WWW-Authenticate", "Bearer")
    return JSONResponse({"detail": detail, "code": code}, status_code=status, headers=out)


def install_error_handlers(app: FastAPI) -> None:
    async def on_auth_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, AuthError)
        headers: dict[str, str] = {}
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            headers["Retry-After"] = str(retry_after)
        return _error(exc.status_code, exc.detail, exc.code, headers)

    async def on_http_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _STATUS_CODES.get(exc.status_code, "error")
        detail = exc.detail if isinstance(exc.detail, str) else "Request failed."
        return _error(exc.status_code, detail, code, dict(exc.headers or {}))

    async def on_validation_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        # FastAPI's shape, less `input` and `ctx`: they echo what was sent, passwords too.
        errors = [
            {"type": e.get("type"), "loc": list(e.get("loc", ())), "msg": e.get("msg")}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": errors}, status_code=422)

    async def on_unavailable(_request: Request, exc: Exception) -> JSONResponse:
        if (
            isinstance(exc, DBAPIError)
            and not isinstance(exc, OperationalError | InterfaceError)
            and not exc.connection_invalidated
        ):
            return await on_unexpected(_request, exc)
        logger.error("dependency unavailable: %s", type(exc).__name__)
        err = ServiceUnavailable()
        return _error(err.status_code, err.detail, err.code, {"Retry-After": str(err.retry_after)})

    async def on_unexpected(_request: Request, exc: Exception) -> JSONResponse:
        logger.error("unhandled %s", type(exc).__name__, exc_info=exc)
        return _error(500, "Internal server error.", "internal_error")

    app.add_exception_handler(AuthError, on_auth_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    for exc_type in (*_UNAVAILABLE, DBAPIError):
        app.add_exception_handler(exc_type, on_unavailable)
    app.add_exception_handler(Exception, on_unexpected)


class RequestGuard:
    """Pure ASGI middleware: request id and event context, and the body size cap.

    The cap is checked on `Content-Length` before anything is read and again while a body of
    unknown length streams in, so no handler ever parses more than `max_body_bytes`.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        trusted_proxies: Sequence[IPv4Network | IPv6Network] = (),
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.trusted_proxies = tuple(trusted_proxies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # One pass over the headers (ASGI gives their names in lower case).
        given_id = user_agent_raw = b""
        length: bytes | None = None
        forwarded: list[str] = []
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                given_id = value
            elif name == b"user-agent":
                user_agent_raw = value
            elif name == b"content-length":
                length = value
            elif name == b"x-forwarded-for":
                forwarded.append(value.decode("latin-1"))
        given = given_id.decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else secrets.token_hex(8)
        client = scope.get("client")
        ip = client_address(client[0] if client else None, forwarded, self.trusted_proxies)
        scope.setdefault("state", {})["authgate_client_ip"] = ip
        user_agent = user_agent_raw.decode("latin-1")
        token = events.request_context.set(
            events.RequestContext(request_id, ip, user_agent or None)
        )

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [
                    (b"x-request-id", request_id.encode()),
                    (b"x-content-type-options", b"nosniff"),
                ]
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        try:
            if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
                err = PayloadTooLarge() if length.isdigit() else None
                response = (
                    _error(413, err.detail, err.code)
                    if err
                    else _error(400, "Invalid Content-Length header.", "bad_request")
                )
                await response(scope, receive, send_with_id)
                return
            if length is None and scope["method"] not in _BODILESS:
                # Unknown length (chunked): read up to the cap here, so an oversized body is a
                # clean 413 rather than whatever the framework makes of an error mid-parse.
                buffered: list[Message] = []
                size = 0
                while True:
                    message = await receive()
                    buffered.append(message)
                    if message["type"] != "http.request":
                        break
                    size += len(message.get("body", b""))
                    if size > self.max_body_bytes:
                        err = PayloadTooLarge()
                        await _error(413, err.detail, err.code)(scope, receive, send_with_id)
                        return
                    if not message.get("more_body", False):
                        break

                async def replay() -> Message:
                    return buffered.pop(0) if buffered else await receive()

                await self.app(scope, replay, send_with_id)
                return
            received = 0

            async def limited_receive() -> Message:
                nonlocal received
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    if received > self.max_body_bytes:
                        raise PayloadTooLarge()
                return message

            await self.app(scope, limited_receive, send_with_id)
        finally:
            events.request_context.reset(token)
