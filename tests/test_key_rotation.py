"""Rotating AUTHGATE_SECRET_KEY: the previous key verifies (never signs) during the change."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from authgate import AuthConfig
from authgate.tokens.keys import Keys, TokenError
from tests.conftest import AppFactory, bearer, login, register

OLD = "old-secret-key-that-is-long-enough-0123456789"
NEW = "new-secret-key-that-is-long-enough-9876543210"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def _keys(secret: str, previous: tuple[str, ...] = ()) -> Keys:
    return Keys(
        secret.encode(),
        issuer="authgate",
        audience="authgate",
        previous=[p.encode() for p in previous],
    )


def test_previous_key_verifies_access_tokens_and_csrf() -> None:
    old, rotated = _keys(OLD), _keys(NEW, previous=(OLD,))
    token = old.issue_access(user_id=1, session_id="a" * 32, now=NOW, ttl=60)
    assert rotated.verify_access(token, now=NOW).user_id == 1
    assert rotated.check_csrf(old.issue_csrf("a" * 32), "a" * 32)
    # New tokens are signed with the new key only.
    fresh = rotated.issue_access(user_id=1, session_id="a" * 32, now=NOW, ttl=60)
    with pytest.raises(TokenError):
        old.verify_access(fresh, now=NOW)
    # Once the previous key is dropped, its tokens are refused.
    with pytest.raises(TokenError):
        _keys(NEW).verify_access(token, now=NOW)
    assert not _keys(NEW).check_csrf(old.issue_csrf("a" * 32), "a" * 32)


def test_previous_keys_must_be_long_enough() -> None:
    with pytest.raises(ValidationError) as info:
        AuthConfig(secret_key=NEW, secret_key_previous="short")
    assert "short" not in str(info.value)


async def test_rotation_through_http(make_client: AppFactory) -> None:
    async with make_client(secret_key=OLD) as client:
        await register(client)
        tokens = await login(client)
    async with make_client(secret_key=NEW, secret_key_previous=OLD) as client:
        client.cookies.clear()
        assert (
            await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        ).status_code == 200
        # Refresh tokens are opaque database records: they survive any key change.
        response = await client.post(
            "/auth/refresh", json={"refresh_token": tokens["refresh_token"]}
        )
        assert response.status_code == 200
        tokens = response.json()
    async with make_client(secret_key=NEW) as client:
        client.cookies.clear()
        assert (
            await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        ).status_code == 200
