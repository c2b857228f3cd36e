"""Refresh grace through HTTP, on both backends (contract §8, AUTHGATE_REFRESH_GRACE): a refresh
token presented again inside the window while its successor is unused gets that same successor
and a working new access token; after the window, or once the successor is used, it is reuse
(401, family revoked). Concurrent presentations make one branch. The default stays strict."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from typing import Any

import httpx
import jwt
import pytest
from sqlalchemy import func, select

from authgate.store.db import Database
from authgate.store.models import RefreshToken, Session
from tests.helpers import (
    TEST_SECRET,
    AppFactory,
    Backend,
    FakeClock,
    assert_error,
    assert_token_response,
    bearer,
    cookie_value,
    fresh_session,
    login,
    make_config,
    post_with_cookies,
    refresh,
    register,
    set_cookies,
)

GRACE = 30
OTHER_SECRET = "another-secret-key-long-enough-9876543210"


def _sid(tokens: dict[str, Any]) -> str:
    sid: str = jwt.decode(tokens["access_token"], options={"verify_signature": False})["sid"]
    return sid


async def _me(client: httpx.AsyncClient, tokens: dict[str, Any]) -> int:
    return (await client.get("/auth/me", headers=bearer(tokens["access_token"]))).status_code


async def _signed_in(client: httpx.AsyncClient) -> dict[str, Any]:
    await register(client)
    tokens = await login(client)
    client.cookies.clear()
    return tokens


async def _family(backend: Backend, session_id: str) -> tuple[int, int, str | None]:
    """(refresh tokens, unused ones, revoke reason) of one session, read from the database."""
    db = Database(make_config(backend))
    try:
        async with db.read() as s:
            tokens = await s.scalar(
                select(func.count()).where(RefreshToken.session_id == session_id)
            )
            unused = await s.scalar(
                select(func.count()).where(
                    RefreshToken.session_id == session_id, RefreshToken.used_at.is_(None)
                )
            )
            reason = await s.scalar(select(Session.revoke_reason).where(Session.id == session_id))
    finally:
        await db.dispose()
    assert tokens is not None
    assert unused is not None
    return tokens, unused, reason


async def test_inside_the_window_the_same_successor_and_a_new_access_token(
    make_client: AppFactory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="authgate.events")
    async with make_client(refresh_grace=GRACE) as client:
        first = await _signed_in(client)
        second = assert_token_response(await refresh(client, first["refresh_token"]))
        # The answer was lost; the client retries within the window.
        clock.advance(GRACE - 1)
        again = assert_token_response(await refresh(client, first["refresh_token"]))
        assert again["refresh_token"] == second["refresh_token"]
        assert again["access_token"] != second["access_token"]
        # Derived, yet shaped like every opaque token: 256 bits, URL-safe base64.
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", second["refresh_token"])
        assert _sid(again) == _sid(second) == _sid(first)
        assert await _me(client, again) == 200
        # The successor rotates (once); the family lives on.
        third = assert_token_response(await refresh(client, second["refresh_token"]))
        assert await _me(client, third) == 200
        assert_token_response(await refresh(client, third["refresh_token"]))

    replayed = [r for r in caplog.records if r.getMessage() == "refresh_replayed"]
    assert len(replayed) == 1
    fields = replayed[0].authgate  # type: ignore[attr-defined]
    assert fields["outcome"] == "success"
    assert fields["session_id"] == _sid(first)
    # No token, nor its digest, in any record.
    secrets = [first["refresh_token"], second["refresh_token"], again["access_token"]]
    secrets += [hashlib.sha256(t.encode()).hexdigest() for t in secrets]
    for record in caplog.records:
        text = f"{record.getMessage()} {getattr(record, 'authgate', '')}"
        assert not any(secret in text for secret in secrets)


async def test_after_the_window_it_is_reuse_and_the_family_is_revoked(
    make_client: AppFactory, clock: FakeClock, backend: Backend
) -> None:
    async with make_client(refresh_grace=GRACE) as client:
        first = await _signed_in(client)
        second = assert_token_response(await refresh(client, first["refresh_token"]))
        clock.advance(GRACE + 1)
        assert_error(await refresh(client, first["refresh_token"]), 401, "refresh_token_reused")
        assert_error(await refresh(client, second["refresh_token"]), 401)
        assert await _me(client, second) == 401
    assert (await _family(backend, _sid(first)))[2] == "reuse"


async def test_once_the_successor_is_used_it_is_reuse(
    make_client: AppFactory, clock: FakeClock, backend: Backend
) -> None:
    async with make_client(refresh_grace=GRACE) as client:
        first = await _signed_in(client)
        second = assert_token_response(await refresh(client, first["refresh_token"]))
        third = assert_token_response(await refresh(client, second["refresh_token"]))
        clock.advance(1)
        assert_error(await refresh(client, first["refresh_token"]), 401, "refresh_token_reused")
        assert_error(await refresh(client, third["refresh_token"]), 401)
        assert await _me(client, third) == 401
    assert (await _family(backend, _sid(first)))[2] == "reuse"


async def test_concurrent_refreshes_with_one_token_get_one_successor(
    make_client: AppFactory, backend: Backend
) -> None:
    async with make_client(refresh_grace=GRACE) as client:
        first = await _signed_in(client)
        responses = await asyncio.gather(
            *(refresh(client, first["refresh_token"]) for _ in range(8))
        )
        bodies = [assert_token_response(r) for r in responses]
        assert len({b["refresh_token"] for b in bodies}) == 1
        assert {_sid(b) for b in bodies} == {_sid(first)}
        for body in bodies:
            assert await _me(client, body) == 200
        # One branch: the spent token and its one successor, the only live token.
        assert await _family(backend, _sid(first)) == (2, 1, None)
        successor = bodies[0]["refresh_token"]
        newer = assert_token_response(await refresh(client, successor))
        assert await _me(client, newer) == 200
        assert await _family(backend, _sid(first)) == (3, 1, None)


async def test_by_default_a_second_presentation_is_reuse(
    make_client: AppFactory, backend: Backend
) -> None:
    async with make_client() as client:  # AUTHGATE_REFRESH_GRACE unset: 0
        first = await _signed_in(client)
        second = assert_token_response(await refresh(client, first["refresh_token"]))
        assert_error(await refresh(client, first["refresh_token"]), 401, "refresh_token_reused")
        assert_error(await refresh(client, second["refresh_token"]), 401)
        assert await _me(client, second) == 401
    assert (await _family(backend, _sid(first)))[2] == "reuse"


async def test_the_cookie_path_replays_with_csrf_and_sets_the_cookies(
    make_client: AppFactory, clock: FakeClock
) -> None:
    async with make_client(refresh_grace=GRACE) as client:
        await register(client)
        first, csrf = await fresh_session(client)
        cookies = {"svc_refresh_token": first["refresh_token"], "svc_csrf_token": csrf}
        response = await post_with_cookies(client, "/auth/refresh", cookies, {"X-CSRF-Token": csrf})
        second = assert_token_response(response)
        clock.advance(5)
        # Without the CSRF header the replay is refused, and nothing is spent or revoked.
        assert_error(await post_with_cookies(client, "/auth/refresh", cookies), 403, "csrf_failed")
        # With it: the same successor, and all three cookies set again.
        response = await post_with_cookies(client, "/auth/refresh", cookies, {"X-CSRF-Token": csrf})
        again = assert_token_response(response)  # checks the three Set-Cookie headers
        assert again["refresh_token"] == second["refresh_token"]
        new_csrf = cookie_value(set_cookies(response)["svc_csrf_token"])
        # The replay's CSRF value is bound to the session: the successor's cookie refresh
        # takes it.
        response = await post_with_cookies(
            client,
            "/auth/refresh",
            {"svc_refresh_token": again["refresh_token"], "svc_csrf_token": new_csrf},
            {"X-CSRF-Token": new_csrf},
        )
        assert_token_response(response)


async def test_replays_are_not_limited_by_the_per_session_refresh_limit(
    make_client: AppFactory,
) -> None:
    """The limit counts rotations (rows added); a replay adds none and is not refused."""
    limits = {"rate_limits": True, "refresh_limit_per_session": "2/minute"}
    async with make_client(refresh_grace=GRACE, **limits) as client:
        first = await _signed_in(client)
        second = assert_token_response(await refresh(client, first["refresh_token"]))
        for _ in range(4):
            again = assert_token_response(await refresh(client, first["refresh_token"]))
            assert again["refresh_token"] == second["refresh_token"]
        third = assert_token_response(await refresh(client, second["refresh_token"]))
        assert_error(await refresh(client, third["refresh_token"]), 429, "rate_limited")


async def test_a_replay_across_a_key_rotation_needs_the_previous_key(
    make_client: AppFactory, backend: Backend
) -> None:
    """The successor was derived under the old key: a server holding it as
    AUTHGATE_SECRET_KEY_PREVIOUS re-derives it; one without it cannot, and that is reuse."""
    async with make_client(refresh_grace=GRACE) as client:
        first = await _signed_in(client)
        second = assert_token_response(await refresh(client, first["refresh_token"]))
    rotated = {"secret_key": OTHER_SECRET, "secret_key_previous": TEST_SECRET}
    async with make_client(refresh_grace=GRACE, **rotated) as client:
        again = assert_token_response(await refresh(client, first["refresh_token"]))
        assert again["refresh_token"] == second["refresh_token"]
        assert await _me(client, again) == 200
    async with make_client(refresh_grace=GRACE, secret_key=OTHER_SECRET) as client:
        assert_error(await refresh(client, first["refresh_token"]), 401, "refresh_token_reused")
    assert (await _family(backend, _sid(first)))[2] == "reuse"
