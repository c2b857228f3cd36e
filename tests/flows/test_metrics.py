"""GET /metrics through HTTP (contract §10), on both backends: the counters move with the
flows that produce them, the token protects the endpoint, and no label value names a user, an
email, a token or a raw path."""

from __future__ import annotations

import asyncio
import re

import httpx
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, generate_latest

from authgate import AuthGate
from tests.helpers import (
    ANN,
    PASSWORD,
    AppFactory,
    Backend,
    FakeClock,
    Outbox,
    assert_error,
    assert_token_response,
    bearer,
    gate_and_app,
    login,
    make_config,
    metric,
    parse_metrics,
    refresh,
    register,
    running,
    scrape,
    warm,
)

METRICS_TOKEN = "m" * 24 + "etrics-token-of-32+"
REQUESTS = "authgate_http_requests_total"


async def test_requests_are_counted_by_route_template_method_and_status(
    client: httpx.AsyncClient,
) -> None:
    body = await register(client)
    tokens = await login(client)
    for _ in range(3):
        assert (await client.get("/auth/me", headers=bearer(tokens["access_token"]))).status_code
    sessions = await client.get("/auth/sessions", headers=bearer(tokens["access_token"]))
    session_id = sessions.json()["sessions"][0]["id"]
    # A route with a path parameter, and a path that matches no route at all.
    await client.delete("/auth/sessions/not-a-session", headers=bearer(tokens["access_token"]))
    assert (await client.get(f"/no/such/{body['id']}/{session_id}")).status_code == 404

    samples = await scrape(client)
    assert metric(samples, REQUESTS, route="/auth/register", method="POST", status="201") == 1
    assert metric(samples, REQUESTS, route="/auth/login", method="POST", status="200") == 1
    assert metric(samples, REQUESTS, route="/auth/me", method="GET", status="200") == 3
    assert metric(samples, REQUESTS, route="/auth/sessions/{session_id}", method="DELETE") == 1
    assert metric(samples, REQUESTS, route="other", method="GET", status="404") == 1
    count = metric(samples, "authgate_http_request_duration_seconds_count", route="/auth/me")
    assert count == 3
    assert metric(samples, "authgate_http_request_duration_seconds_sum", route="/auth/me") > 0


async def test_flows_move_their_counters(backend: Backend, clock: FakeClock) -> None:
    gate, app = gate_and_app(backend, clock)
    async with running(app) as client:
        before = await scrape(client)
        assert metric(before, "authgate_logins_total") == 0
        await register(client)
        first = await login(client)
        bad = await client.post("/auth/login", json={"email": ANN, "password": "wrong " * 3})
        assert_error(bad, 401, "invalid_credentials")
        unknown = {"email": "nobody@example.com", "password": PASSWORD}
        assert_error(await client.post("/auth/login", json=unknown), 401)
        client.cookies.clear()
        second = assert_token_response(await refresh(client, first["refresh_token"]))
        assert_token_response(await refresh(client, second["refresh_token"]))
        # The first refresh token, two rotations old: reuse, the family is revoked.
        assert_error(await refresh(client, first["refresh_token"]), 401, "refresh_token_reused")
        await client.get("/auth/me", headers=bearer(first["access_token"]))

        samples = await scrape(client)
    assert metric(samples, "authgate_registrations_total", outcome="success") == 1
    assert metric(samples, "authgate_logins_total", outcome="success") == 1
    assert metric(samples, "authgate_logins_total", outcome="failure") == 2
    assert metric(samples, "authgate_logins_total", reason="wrong_password") == 1
    assert metric(samples, "authgate_refreshes_total", outcome="success") == 2
    assert metric(samples, "authgate_refreshes_total", outcome="reuse_detected") == 1
    assert metric(samples, "authgate_sessions_revoked_total", reason="reuse") == 1
    assert metric(samples, "authgate_events_total", event="login_failed") == 2
    # Four hashes at least (register, three logins), each waited for a thread and was timed.
    assert metric(samples, "authgate_password_hash_queue_wait_seconds_count") >= 4
    assert metric(samples, "authgate_busy_responses_total") == 0
    if backend.name == "postgres":
        # The access token's session was looked up past this worker's copy at least once.
        assert metric(samples, "authgate_state_cache_total", tier="local", result="miss") >= 1
        lookups = metric(samples, "authgate_state_cache_total", tier="redis")
        assert lookups == metric(samples, "authgate_state_cache_total", result="miss", tier="local")
    assert gate.metrics is not None


async def test_rate_limited_requests_are_counted_by_policy(make_client: AppFactory) -> None:
    async with make_client(rate_limits=True, login_limit_per_ip="2/minute") as client:
        statuses = []
        for _ in range(4):
            wrong = {"email": ANN, "password": "not the password"}
            statuses.append((await client.post("/auth/login", json=wrong)).status_code)
        samples = await scrape(client)
    assert statuses.count(429) == 2, statuses
    assert metric(samples, "authgate_rate_limited_total", policy="login_per_ip") == 2
    assert metric(samples, REQUESTS, route="/auth/login", status="429") == 2


async def test_mails_are_counted_by_purpose_and_outcome(backend: Backend, clock: FakeClock) -> None:
    outbox = Outbox()

    async def broken(_email: str, _token: str) -> None:
        raise ConnectionError("the mail API is away")

    gate, app = gate_and_app(
        backend, clock, password_reset_send_fn=outbox, email_verify_send_fn=broken
    )
    async with running(app) as client:
        await register(client)
        tokens = await login(client)
        await client.post("/auth/password-reset", json={"email": ANN})
        await outbox.wait_for(1)
        verify = await client.post(
            "/auth/email-verification", headers=bearer(tokens["access_token"])
        )
        assert verify.status_code == 200, verify.text
        await gate.services.background.drain()
        samples = await scrape(client)
    assert metric(samples, "authgate_mails_total", purpose="reset", outcome="sent") == 1
    # The verification mail's sender fails: that is counted too.
    assert metric(samples, "authgate_mails_total", purpose="verify", outcome="failed") == 1


async def test_the_metrics_token_protects_the_endpoint(make_client: AppFactory) -> None:
    async with make_client(metrics_token=METRICS_TOKEN) as client:
        missing = await client.get("/metrics")
        assert_error(missing, 401, "not_authenticated")
        assert_error(await client.get("/metrics", headers=bearer("x" + METRICS_TOKEN[1:])), 403)
        assert_error(await client.get("/metrics", headers=bearer(METRICS_TOKEN[:-1])), 403)
        basic = {"Authorization": "Basic " + METRICS_TOKEN}
        assert_error(await client.get("/metrics", headers=basic), 401)
        samples = await scrape(client, METRICS_TOKEN)
        # The refused scrapes were counted, with their statuses; the token is in no label.
        assert metric(samples, REQUESTS, route="/metrics", status="403") == 2
        body = (await client.get("/metrics", headers=bearer(METRICS_TOKEN))).text
    assert METRICS_TOKEN not in body


async def test_metrics_off_is_a_404(make_client: AppFactory) -> None:
    async with make_client(metrics=False) as client:
        assert_error(await client.get("/metrics"), 404)
        assert "/metrics" not in (await client.get("/openapi.json")).text


async def test_no_label_names_a_user_an_email_a_token_or_a_raw_path(
    client: httpx.AsyncClient,
) -> None:
    body = await register(client)
    tokens = await login(client)
    headers = bearer(tokens["access_token"])
    sessions = (await client.get("/auth/sessions", headers=headers)).json()["sessions"]
    session_id = sessions[0]["id"]
    await client.delete(f"/auth/sessions/{session_id}x", headers=headers)
    await client.get(f"/auth/users/{body['id']}?email={ANN}", headers=headers)
    await client.request("PURGE", "/auth/me", headers=headers)
    await refresh(client, tokens["refresh_token"])

    samples = await scrape(client)
    secrets = {ANN, tokens["access_token"], tokens["refresh_token"], session_id}
    for (name, pairs), _value in samples.items():
        for label, value in pairs:
            assert "@" not in value, (name, label, value)
            assert not any(s in value for s in secrets), (name, label)
            if value.isdigit():
                # Only a status is a number (a user id never is a label).
                assert label == "status", (name, label, value)
            if label == "route":
                assert value == "other" or not re.search(r"/\d+(/|$)", value), value
                assert session_id not in value
            if label == "method":
                assert value in {"GET", "POST", "DELETE", "OTHER"}, value
    assert metric(samples, REQUESTS, method="OTHER") == 1


async def test_a_library_user_brings_a_registry(backend: Backend, clock: FakeClock) -> None:
    """`AuthGate(config, metrics_registry=...)`: the families land on the caller's registry,
    which the host application exposes however it likes (here: the same router)."""
    registry = CollectorRegistry()
    gate = AuthGate(make_config(backend, metrics=False), clock=clock, metrics_registry=registry)
    host = FastAPI(lifespan=gate.lifespan)
    gate.install(host)
    async with running(host) as client:
        assert_error(await client.get("/metrics"), 404)  # AUTHGATE_METRICS=off: not mounted
        await register(client)
        await login(client)
    samples = parse_metrics(generate_latest(registry).decode())
    assert metric(samples, "authgate_logins_total", outcome="success") == 1
    assert metric(samples, REQUESTS, route="/auth/login") == 1


async def test_busy_answers_and_the_hash_queue_are_counted(make_client: AppFactory) -> None:
    """One hash thread and a queue of one: a burst of logins gets 503 busy, each counted."""
    async with make_client(hash_threads=1, hash_max_wait=0.001) as client:
        await register(client)
        wrong = {"email": ANN, "password": "not the password"}
        burst = await asyncio.gather(*(client.post("/auth/login", json=wrong) for _ in range(6)))
        samples = await scrape(client)
    busy = [r for r in burst if r.status_code == 503]
    assert busy, [r.status_code for r in burst]
    for response in busy:
        assert_error(response, 503, "busy")
    assert metric(samples, "authgate_busy_responses_total") == len(busy)
    assert metric(samples, REQUESTS, route="/auth/login", status="503") == len(busy)
    # The registration's hash and every login admitted to the queue waited for the thread
    # (a login may still be refused after its wait, when it waited past the budget).
    waited = metric(samples, "authgate_password_hash_queue_wait_seconds_count")
    assert 1 + len(burst) - len(busy) <= waited <= 1 + len(burst)
    assert metric(samples, "authgate_password_hash_pending") == 0


async def test_state_cache_hits_and_misses_are_counted(backend: Backend, clock: FakeClock) -> None:
    gate, app = gate_and_app(backend, clock)
    async with running(app) as client:
        if backend.name == "sqlite":
            # No shared cache: every check reads the database, and there is no tier to count.
            await register(client)
            auth = bearer((await login(client))["access_token"])
            for _ in range(3):
                assert (await client.get("/auth/me", headers=auth)).status_code == 200
            assert metric(await scrape(client), "authgate_state_cache_total") == 0
            return
        # One GET /me past the worker's copy (a local miss, then Redis), and warm's own look
        # at the copy (a hit); then five answered from the copy.
        _tokens, auth, _sid, _uid, _local = await warm(gate, client, clock)
        for _ in range(5):
            assert (await client.get("/auth/me", headers=auth)).status_code == 200
        samples = await scrape(client)
    assert metric(samples, "authgate_state_cache_total", tier="local", result="hit") == 6
    assert metric(samples, "authgate_state_cache_total", tier="local", result="miss") == 1
    assert metric(samples, "authgate_state_cache_total", tier="redis") == 1
