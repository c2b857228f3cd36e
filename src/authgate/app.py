"""The composition root: builds every resource from one `AuthConfig` and wires them into a
FastAPI application, standalone (`create_app`) or mounted in an existing one (`AuthGate`)."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from prometheus_client import CollectorRegistry

from authgate import events
from authgate.cache.base import Cache, RedisCache, open_cache
from authgate.cache.counters import CounterStore, RedisCounters
from authgate.cache.ratelimit import RateLimiter, budgets_from
from authgate.cache.sweep import SWEEP_MARGIN
from authgate.config import AuthConfig
from authgate.datadir import ensure_secret_key
from authgate.factors.hashing import PasswordHashing
from authgate.factors.password_rules import common_passwords
from authgate.factors.sealing import Sealer
from authgate.mail.delivery import make_notices, make_senders
from authgate.metrics import Metrics
from authgate.services.accounts import AccountService
from authgate.services.assurance import Assurance
from authgate.services.audit import AuditWriter
from authgate.services.context import Background, Clock, Services, utcnow
from authgate.services.mfa import MfaService
from authgate.services.passkeys import PasskeyService
from authgate.services.self_service import SelfService
from authgate.services.sessions import SessionService
from authgate.store.db import Database, upgrade_schema
from authgate.store.limits import SqlCounters
from authgate.store.sweep import DatabaseChanges
from authgate.tokens.jwks import load_signing_keys
from authgate.tokens.keys import Keys
from authgate.web.handlers import install_error_handlers
from authgate.web.middleware import RequestGuard
from authgate.web.pages import pages_router
from authgate.web.routes import (
    add_docs,
    admin_router,
    auth_router,
    client_router,
    email_router,
    health_router,
    mfa_router,
    passkeys_router,
    self_service_router,
)
from authgate.web.routes.metrics import metrics_router
from authgate.web.routing import GateRouter
from authgate.web.transport import rate_limit_address, trusted_networks

__all__ = ["AuthGate", "create_app"]

logger = logging.getLogger("authgate")

#: The sealing key's label: changing it would make every stored TOTP secret unreadable.
TOTP_SEAL_LABEL = b"authgate/totp-secret/v1"

try:
    __version__ = version("authgate")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"


class AuthGate:
    """authgate's resources and routes, ready to serve or to mount.

    >>> gate = AuthGate(AuthConfig())
    >>> app = FastAPI(lifespan=gate.lifespan)
    >>> gate.install(app)
    """

    def __init__(
        self,
        config: AuthConfig | None = None,
        *,
        clock: Clock = utcnow,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        """`metrics_registry`: where the metrics go (README, "Metrics"): by default a
        registry of this gate's own, served at `GET /metrics`."""
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
            notices=make_notices(cfg),
            background=Background(),
            sealer=Sealer(cfg.secret(), cfg.previous_secrets(), label=TOTP_SEAL_LABEL),
            clock=clock,
            session_states=self.cache.session_states(
                prefix=cfg.cache_prefix,
                tombstone_ttl=cfg.access_ttl + 60,
                # Swept from the database (revocations that never reached Redis); the
                # margin covers a write's pool wait and statement (db_timeout each).
                changes=DatabaseChanges(db, clock),
                sweep_margin=max(SWEEP_MARGIN, 3 * cfg.db_timeout),
            ),
        )
        self.sessions = SessionService(self.services)
        self.accounts = AccountService(self.services)
        self.self_service = SelfService(self.services)
        self.assurance = Assurance(self.services, self.sessions)
        self.mfa = MfaService(self.services, self.assurance)
        self.passkeys = PasskeyService(self.services, self.assurance)
        #: Where every event of this gate's requests also goes (`events.Sink`): the audit log
        #: and the metrics add theirs.
        self.event_sinks: list[events.Sink] = []
        self.metrics = Metrics.for_services(
            self.services, enabled=cfg.metrics, registry=metrics_registry
        )
        if self.metrics is not None:
            self.event_sinks.append(self.metrics.sink)
        #: The audit log's writer (None when AUTHGATE_AUDIT_RETENTION_DAYS is 0).
        self.audit = AuditWriter.for_config(cfg, db, clock)
        if self.audit is not None:
            self.event_sinks.append(self.audit)

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
        session_states = self.services.session_states
        await session_states.start()
        try:
            yield
        finally:
            if self.metrics is not None:  # the requests still in this worker's tally
                self.metrics.flush()
            await session_states.stop()
            await self.services.background.drain()
            if self.audit is not None:  # the events still buffered
                await self.audit.close()
            await self.cache.aclose()
            await self.services.db.dispose()

    def install(self, app: FastAPI) -> None:
        """Mount the auth routes, the health endpoints and the error handling on `app`."""
        app.state.authgate = self
        # One router for all of authgate's routes: a request to one of the host's own routes
        # is told "not authgate's" in one test instead of ~100 (web/routing.py).
        routes = GateRouter()
        routes.include_router(auth_router(self))
        routes.include_router(email_router(self))
        routes.include_router(self_service_router(self))
        routes.include_router(mfa_router(self))
        routes.include_router(passkeys_router(self))
        routes.include_router(client_router(self))
        routes.include_router(admin_router(self))
        if self.config.pages:
            routes.include_router(pages_router(self))
        routes.include_router(health_router(self))
        if self.config.metrics and self.metrics is not None:
            routes.include_router(metrics_router(self, self.metrics))
        app.include_router(routes)
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
            trusted_proxies=trusted_networks(self.config),
            sinks=self.event_sinks,
            metrics=self.metrics,
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
        budgets_from(cfg),
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
        add_docs(app)
    return app
