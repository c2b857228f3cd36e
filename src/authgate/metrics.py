"""Prometheus metrics (contract §10): the families, where each number is born, and exposition.

One `Metrics` per `AuthGate`, on a registry of its own unless the caller passes one
(`AuthGate(config, metrics_registry=prometheus_client.REGISTRY)` puts them on the default
registry; only one gate per registry, since a name is registered once). The lower layers never
import this module's families: `connect` hands them plain callables (a pre-bound `inc` or
`observe`), so `factors/`, `cache/` and `mail/` stay free of Prometheus and of the web. GET
/me's path pays plain arithmetic only: requests go to a tally and local-copy hits to an int,
both handed to the families by `flush` (see `record_request`).

Under `authgate serve --workers N` the CLI sets `PROMETHEUS_MULTIPROC_DIR` before the workers
start (`cli/serve_metrics.py`): every value is then kept in that directory's memory-mapped files
and `exposition` sums them over every worker, live or dead. Counters and histograms of a worker
that exited stay in the sum (nothing lost, nothing counted twice); its live gauges are dropped.

Labels are fixed words only: route templates (`/auth/sessions/{session_id}`, never a raw path),
methods, statuses, outcomes, reasons, policies, purposes. No user id, email, token or address.
"""

from __future__ import annotations

import asyncio
import os
import re
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

__all__ = ["FLUSH_INTERVAL", "MULTIPROC_ENV", "Metrics", "exposition", "multiprocess_dir"]

#: Seconds a request's count and duration may wait in a worker's tally (`record_request`).
FLUSH_INTERVAL = 1.0

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST
#: A reason word as `events.emit` callers write it (`unknown_email`, `factor_added,limited`).
_WORD = re.compile(r"^[a-z_,]{1,48}$")
#: Request latency: 1 ms (GET /me from the worker's copy) to 10 s (a hash under load).
_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Hash queue wait: the admission bound (`AUTHGATE_HASH_MAX_WAIT`, 0.5 s by default) in view.
_WAIT = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0)

#: Events that each revoke one session (a family), and the reason when the event has none.
_REVOKING = {"logged_out": "logout", "session_revoked": "user", "refresh_reused": "reuse"}
_REFRESH = {
    "refreshed": "success",
    "refresh_replayed": "replayed",
    "refresh_reused": "reuse_detected",
    "refresh_failed": "failure",
}
_SECOND_FACTOR = {"mfa_verified", "mfa_failed", "recovery_code_used", "passkey_used"}


def multiprocess_dir() -> str | None:
    """The directory `authgate serve --workers N` (or the operator) set, if any."""
    return os.environ.get(MULTIPROC_ENV) or None


def _word(value: Any) -> str:
    return value if isinstance(value, str) and _WORD.match(value) else "other"


class Metrics:
    """Every family authgate exports, registered on `registry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.requests = Counter(
            "authgate_http_requests",
            "HTTP requests by route template, method and status.",
            ("route", "method", "status"),
            registry=reg,
        )
        self.latency = Histogram(
            "authgate_http_request_duration_seconds",
            "Time from the request's arrival to the end of its answer, by route template.",
            ("route", "method"),
            buckets=_LATENCY,
            registry=reg,
        )
        self.events = Counter(
            "authgate_events",
            "Security events (events.EVENT_NAMES) by outcome.",
            ("event", "outcome"),
            registry=reg,
        )
        self.logins = Counter(
            "authgate_logins",
            "Password logins by outcome and failure reason.",
            ("outcome", "reason"),
            registry=reg,
        )
        self.refreshes = Counter(
            "authgate_refreshes",
            "Refresh-token rotations: success, replayed (grace), reuse_detected, failure.",
            ("outcome",),
            registry=reg,
        )
        self.registrations = Counter(
            "authgate_registrations",
            "Accounts registered, by outcome.",
            ("outcome",),
            registry=reg,
        )
        self.revocations = Counter(
            "authgate_sessions_revoked",
            "Sessions revoked (logout, reuse, user, password_reset, admin, ...), by reason.",
            ("reason",),
            registry=reg,
        )
        self.second_factor = Counter(
            "authgate_second_factor",
            "Second-factor checks by factor and outcome.",
            ("factor", "outcome"),
            registry=reg,
        )
        self.hash_wait = Histogram(
            "authgate_password_hash_queue_wait_seconds",
            "Time a password hash or verification waited for a hash thread.",
            buckets=_WAIT,
            registry=reg,
        )
        # livesum: the sum over the workers alive now; a dead worker's queue is gone with it.
        self.hash_pending = Gauge(
            "authgate_password_hash_pending",
            "Hashes running or waiting in the admission queue, summed over live workers.",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self.busy = Counter(
            "authgate_busy_responses",
            "Requests refused with 503 busy because the password-hash queue was full.",
            registry=reg,
        )
        self.rate_limited = Counter(
            "authgate_rate_limited",
            "Requests over a rate limit, by policy.",
            ("policy",),
            registry=reg,
        )
        self.mails = Counter(
            "authgate_mails",
            "Mails by purpose and outcome (sent, failed).",
            ("purpose", "outcome"),
            registry=reg,
        )
        self.state_cache = Counter(
            "authgate_state_cache",
            "Session-state lookups by tier (local: this worker's copy; redis) and result.",
            ("tier", "result"),
            registry=reg,
        )
        self._local_hits = self.state_cache.labels("local", "hit")
        #: Requests since the last flush: (route, method, status) -> [one count per latency
        #: bucket (+Inf last), the sum of the durations]. See `record_request`.
        self._tally: dict[tuple[str, str, int], list[float]] = {}
        self._flush_due = False
        self._local: Any = None
        self._hits_flushed = 0

    def record_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one request: plain arithmetic on this worker's tally, nothing else.

        GET /me costs a few hundred microseconds; a prometheus_client `inc` plus `observe`
        (a lock each, a memory-mapped write each under multiprocess mode) would be several
        per cent of it. So each request adds to a list here, and `flush` hands the totals
        to the families at most `FLUSH_INTERVAL` seconds later, before every scrape of this
        process and when the application stops (`AuthGate.lifespan`). A worker killed with
        SIGKILL loses at most its last second of request counts; nothing else is deferred.
        """
        key = (route, method, status)
        tally = self._tally.get(key)
        if tally is None:
            tally = self._tally[key] = [0.0] * (len(_LATENCY) + 2)
        tally[bisect_left(_LATENCY, seconds)] += 1  # `le` is inclusive: the first bound >= it
        tally[-1] += seconds
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_later(FLUSH_INTERVAL, self.flush)

    def flush(self) -> None:
        """Hand the tally (and this worker's local-copy hits) to the families. Called on
        the event loop that records, never from another thread."""
        self._flush_due = False
        for (route, method, status), tally in self._tally.items():
            count = sum(tally[:-1])
            if not count:
                continue
            self.requests.labels(route, method, str(status)).inc(count)
            child = self.latency.labels(route, method)
            # prometheus_client keeps a histogram child as one value per bucket (not yet
            # cumulative) and its sum: what `observe` would have added, in one step each.
            for bucket, n in zip(child._buckets, tally[:-1], strict=True):
                if n:
                    bucket.inc(n)
            child._sum.inc(tally[-1])
            tally[:] = [0.0] * len(tally)
        if self._local is not None:
            hits = self._local.hits
            if hits > self._hits_flushed:
                self._local_hits.inc(hits - self._hits_flushed)
            self._hits_flushed = hits

    def sink(self, record: Mapping[str, Any]) -> None:
        """An `events.Sink`: the flows' counters, derived from their events."""
        event, outcome = record["event"], record["outcome"]
        self.events.labels(event, outcome).inc()
        if event in ("login_succeeded", "login_failed"):
            reason = "" if outcome == "success" else _word(record.get("reason"))
            self.logins.labels(outcome, reason).inc()
        elif event in _REFRESH:
            self.refreshes.labels(_REFRESH[event]).inc()
        elif event == "registered":
            self.registrations.labels(outcome).inc()
        elif event in _SECOND_FACTOR:
            factor = _word(record.get("factor") or event.split("_")[0])
            self.second_factor.labels(factor, outcome).inc()
        if event in _REVOKING:
            self.revocations.labels(_word(record.get("reason") or _REVOKING[event])).inc()

    def rate_limited_by(self, policy: str) -> None:
        self.rate_limited.labels(policy).inc()

    def mail(self, purpose: str, outcome: str) -> None:
        self.mails.labels(purpose, outcome).inc()

    @classmethod
    def for_services(
        cls, services: Any, *, enabled: bool, registry: CollectorRegistry | None
    ) -> Metrics | None:
        """The gate's metrics, connected to its resources (`services.context.Services`);
        None when `AUTHGATE_METRICS=off` and no registry was asked for."""
        if not enabled and registry is None:
            return None
        metrics = cls(registry)
        mailers = [*services.senders.values(), services.notices]
        metrics.connect(services.hashing, services.limiter, services.session_states, mailers)
        return metrics

    def connect(self, hashing: Any, limiter: Any, states: Any, mailers: Iterable[Any]) -> None:
        """Hand each lower layer the callables it records through (see their `on_*`)."""
        hashing.on_wait = self.hash_wait.observe
        hashing.on_busy = self.busy.inc
        hashing.on_pending = self.hash_pending.set
        limiter.on_limited = self.rate_limited_by
        local = getattr(states, "local", None)
        if local is not None:  # the Redis tiers (cache/state.py); the database alone has none
            self._local = local  # its `hits`, a plain int, read at each flush
            states.on_lookup = self._state_lookup
        for mailer in mailers:
            if mailer is not None:
                mailer.on_sent = self.mail

    def _state_lookup(self, redis_hit: bool) -> None:
        """One lookup past this worker's copy: a local miss, and Redis's answer."""
        self.state_cache.labels("local", "miss").inc()
        self.state_cache.labels("redis", "hit" if redis_hit else "miss").inc()


def exposition(metrics: Metrics) -> tuple[bytes, str]:
    """The text format: summed over every worker's files under multiprocess mode."""
    path = multiprocess_dir()
    if path is None:
        return generate_latest(metrics.registry), CONTENT_TYPE
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    return generate_latest(registry), CONTENT_TYPE
