"""Account enumeration by timing: known and unknown emails must answer alike.

Login does the same argon2 verify for an unknown email as for a wrong password; a reset
request answers before the lookup and the mail, which run in the background. These tests
measure that from the outside: a few hundred requests, known and unknown emails interleaved
in a seeded random order (so drift, warm caches and background work land on both groups
alike), each timed with `perf_counter_ns` around the call. The groups are compared twice:
by median, and by the mean of their 10th-20th percentile band (the fast, quiet end of each
distribution, where the work a request itself does shows and scheduler noise mostly does
not). A statistic passes when the gap is under max(5 ms, 10 % of the larger value).

The app runs in-process (httpx's ASGITransport, one client for every request) rather than
as a server process. What could tell the groups apart is work inside the request path
(hashing, lookups, inserts, mail), and that runs the same in-process; a socket and a second
process would add only loopback jitter, shared by both groups, and start-up time. Sharing
the event loop with the client makes the test stricter, not looser: background work that
leaked into an answer would delay it here too. After each request, outside the timed
window, the test waits (bounded) for the app's background tasks to finish, so one request's
mail does not land in the next one's time.

Marked `timing` and run once per run, on the embedded SQLite setup: the parametrized
`backend` fixture is not used (timing is about the code path, not the storage backend).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from authgate import create_app
from tests.helpers import PASSWORD, Backend, Outbox, make_config, register, running

pytestmark = pytest.mark.timing

SEED = 20240608
KNOWN = [f"user{i}@example.com" for i in range(5)]
UNKNOWN = [f"ghost{i}@example.com" for i in range(5)]
WRONG_PASSWORD = "not the right password"
SAMPLES = 300  # requests measured, half of each kind
WARMUP = 20  # requests of each kind before measuring, not timed
ABS_TOLERANCE_MS = 5.0
REL_TOLERANCE = 0.10
SETTLE_LIMIT = 500  # polls of 1 ms at most, waiting for background tasks
#: Tasks the app keeps for its whole life (started by the first event, not by one request's
#: work): never waited for. Waiting for the audit writer made every request wait out the
#: whole settle limit (about 10 minutes of CI).
RESIDENT = frozenset({"authgate-audit-writer"})

Send = Callable[[httpx.AsyncClient, str], Awaitable[httpx.Response]]


@dataclass(frozen=True)
class Comparison:
    what: str
    known_ms: float
    unknown_ms: float

    @property
    def gap_ms(self) -> float:
        return abs(self.known_ms - self.unknown_ms)

    @property
    def allowed_ms(self) -> float:
        return max(ABS_TOLERANCE_MS, REL_TOLERANCE * max(self.known_ms, self.unknown_ms))

    @property
    def ok(self) -> bool:
        return self.gap_ms < self.allowed_ms

    def __str__(self) -> str:
        return (
            f"{self.what}: known {self.known_ms:.2f} ms, unknown {self.unknown_ms:.2f} ms, "
            f"gap {self.gap_ms:.2f} ms (allowed < {self.allowed_ms:.2f} ms)"
            f" {'ok' if self.ok else 'LEAK'}"
        )


def band_mean(samples: Sequence[float], low: float = 0.10, high: float = 0.20) -> float:
    """Mean of the samples between the `low` and `high` quantiles (sorted, inclusive)."""
    ordered = sorted(samples)
    first = int(low * len(ordered))
    last = max(first + 1, int(high * len(ordered)) + 1)
    return statistics.fmean(ordered[first:last])


def compare(label: str, known: Sequence[float], unknown: Sequence[float]) -> list[Comparison]:
    return [
        Comparison(f"{label} median", statistics.median(known), statistics.median(unknown)),
        Comparison(f"{label} p10-p20 band", band_mean(known), band_mean(unknown)),
    ]


async def settle(baseline: set[asyncio.Task[object]]) -> None:
    """Wait (bounded) until every task the app started since `baseline` is done."""
    current = asyncio.current_task()
    for _ in range(SETTLE_LIMIT):
        if all(
            t in baseline or t is current or t.get_name() in RESIDENT for t in asyncio.all_tasks()
        ):
            return
        await asyncio.sleep(0.001)


async def measure(
    client: httpx.AsyncClient,
    send: Send,
    expected_status: int,
    *,
    samples: int = SAMPLES,
    warmup: int = WARMUP,
    seed: int = SEED,
) -> tuple[list[float], list[float]]:
    """Time `samples` requests, half known and half unknown emails, in a seeded random
    order after `warmup` untimed requests of each kind. Returns (known_ms, unknown_ms)."""
    rng = random.Random(seed)
    baseline = set(asyncio.all_tasks())
    kinds = [True] * warmup + [False] * warmup
    rng.shuffle(kinds)
    for i, is_known in enumerate(kinds):
        email = (KNOWN if is_known else UNKNOWN)[i % len(KNOWN)]
        response = await send(client, email)
        assert response.status_code == expected_status, response.text
        await settle(baseline)

    order = [True] * (samples // 2) + [False] * (samples // 2)
    rng.shuffle(order)
    timings: dict[bool, list[float]] = {True: [], False: []}
    for i, is_known in enumerate(order):
        email = (KNOWN if is_known else UNKNOWN)[i % len(KNOWN)]
        started = time.perf_counter_ns()
        response = await send(client, email)
        elapsed = time.perf_counter_ns() - started
        assert response.status_code == expected_status, response.text
        timings[is_known].append(elapsed / 1e6)
        await settle(baseline)
    return timings[True], timings[False]


async def send_login(client: httpx.AsyncClient, email: str) -> httpx.Response:
    return await client.post("/auth/login", json={"email": email, "password": WRONG_PASSWORD})


async def send_reset(client: httpx.AsyncClient, email: str) -> httpx.Response:
    return await client.post("/auth/password-reset", json={"email": email})


class SmtpLikeSender(Outbox):
    """A sender that takes as long as a quick SMTP exchange: were the mail sent in the
    request path, known emails would answer about this much later."""

    delay_s = 0.010

    async def __call__(self, email: str, token: str) -> None:
        await asyncio.sleep(self.delay_s)
        await super().__call__(email, token)


def report(results: list[Comparison]) -> None:
    for result in results:
        print(result)


async def test_login_time_does_not_tell_known_from_unknown_email(tmp_path: Path) -> None:
    config = make_config(Backend("sqlite", tmp_path / "data"))
    assert not config.rate_limits
    async with running(create_app(config)) as client:
        for email in KNOWN:
            await register(client, email, PASSWORD)
        known, unknown = await measure(client, send_login, 401)
    results = compare("login", known, unknown)
    report(results)
    assert all(r.ok for r in results), "\n".join(map(str, results))


async def test_reset_request_time_does_not_tell_known_from_unknown_email(tmp_path: Path) -> None:
    outbox = SmtpLikeSender()
    config = make_config(Backend("sqlite", tmp_path / "data"), password_reset_send_fn=outbox)
    assert not config.rate_limits
    async with running(create_app(config)) as client:
        for email in KNOWN:
            await register(client, email, PASSWORD)
        known, unknown = await measure(client, send_reset, 200)
    # The background work really ran: one mail per known-email request, none for the rest.
    assert len(outbox.sent) == WARMUP + SAMPLES // 2
    assert {email for email, _ in outbox.sent} <= set(KNOWN)
    results = compare("password-reset", known, unknown)
    report(results)
    assert all(r.ok for r in results), "\n".join(map(str, results))


async def test_login_time_does_not_tell_outdated_hash_from_unknown_email(tmp_path: Path) -> None:
    """Security finding F9: a stored hash with older, cheaper argon2 parameters verifies
    faster; a wrong password for such an account must still take what an unknown email
    takes (the difference is waited out)."""
    from argon2 import PasswordHasher
    from sqlalchemy import update

    from authgate.store.models import User

    config = make_config(Backend("sqlite", tmp_path / "data"))
    app = create_app(config)
    async with running(app) as client:
        for email in KNOWN:
            await register(client, email, PASSWORD)
        # Hashes made with a quarter of today's memory and one pass: much cheaper to verify.
        old = PasswordHasher(time_cost=1, memory_cost=4096, parallelism=1).hash(PASSWORD)
        async with app.state.authgate.services.db.write() as s:
            await s.execute(update(User).values(password_hash=old))
        known, unknown = await measure(client, send_login, 401)
    results = compare("login (outdated hash)", known, unknown)
    report(results)
    assert all(r.ok for r in results), "\n".join(map(str, results))
