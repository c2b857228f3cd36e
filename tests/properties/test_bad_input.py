"""Hostile input on every POST endpoint, on both backends: always a 4xx in the contract's
error shape (never a 500, never an echo of what was sent), and nothing changes.

Logout is the documented exception: it answers 200 when its body is valid JSON of the right
shape but carries a token that is no good ("invalid tokens are silently ignored"), and 422
when the body is not a LogoutRequest at all. Password-reset answers its documented 200 for
an email that names no possible account (and sends nothing).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.helpers import (
    PASSWORD,
    AppFactory,
    Backend,
    Outbox,
    bearer,
    count_users,
    login,
    register,
)

VICTIM = "victim@example.com"
FAKE_TOKEN = "A" * 43
MAX_BODY = 16_384

#: A valid body of each POST endpoint that takes one; the string fields get attacked.
VALID: dict[str, dict[str, str]] = {
    "/auth/register": {"email": "new@example.com", "password": PASSWORD},
    "/auth/login": {"email": VICTIM, "password": PASSWORD},
    "/auth/refresh": {"refresh_token": FAKE_TOKEN},
    "/auth/logout": {"refresh_token": FAKE_TOKEN},
    "/auth/password-reset": {"email": VICTIM},
    "/auth/password-reset/confirm": {"token": FAKE_TOKEN, "new_password": "a new password 1"},
    "/auth/email-verification/confirm": {"token": FAKE_TOKEN},
}
ENDPOINTS = list(VALID)
#: Statuses an endpoint may give to well-formed JSON whose values are hostile.
SEMANTIC_REFUSAL: dict[str, set[int]] = {
    "/auth/register": {422},
    "/auth/login": {401, 422},
    "/auth/refresh": {401, 422},
    "/auth/logout": {200, 422},
    "/auth/password-reset": {200, 422},
    "/auth/password-reset/confirm": {400, 422},
    "/auth/email-verification/confirm": {400, 422},
}
JSON = {"content-type": "application/json"}


@dataclass
class Case:
    name: str
    request: Callable[[str], dict[str, Any]]
    #: Allowed statuses; None means the endpoint's SEMANTIC_REFUSAL.
    expect: Callable[[str], set[int]] | None = None
    secrets: list[str] = field(default_factory=list)
    #: The kind of field attacked: the case applies only to endpoints that have one.
    kind: str | None = None


def raw(body: bytes, headers: dict[str, str] | None = None) -> Callable[[str], dict[str, Any]]:
    return lambda _path: {"content": body, "headers": {**JSON, **(headers or {})}}


def fixed(*codes: int) -> Callable[[str], set[int]]:
    return lambda _path: set(codes)


def with_field(kind: str, value: Any) -> Callable[[str], dict[str, Any]]:
    """The endpoint's valid body with every field of `kind` set to `value`."""

    def build(path: str) -> dict[str, Any]:
        body: dict[str, Any] = dict(VALID[path])
        for name in body:
            if _kind(name) == kind:
                body[name] = value
        return {"content": json.dumps(body).encode(), "headers": JSON}

    return build


def with_raw_field(kind: str, escaped_json_string: str) -> Callable[[str], dict[str, Any]]:
    """Like `with_field`, with the value written as raw JSON text (for lone surrogates)."""

    def build(path: str) -> dict[str, Any]:
        parts = []
        for name, value in VALID[path].items():
            text = escaped_json_string if _kind(name) == kind else json.dumps(value)
            parts.append(f'"{name}": {text}')
        return {"content": ("{" + ", ".join(parts) + "}").encode(), "headers": JSON}

    return build


def without(drop: str) -> Callable[[str], dict[str, Any]]:
    def build(path: str) -> dict[str, Any]:
        body = {k: v for k, v in VALID[path].items() if k != drop and _kind(k) != drop}
        return {"content": json.dumps(body).encode(), "headers": JSON}

    return build


def _kind(name: str) -> str:
    return {"new_password": "password", "refresh_token": "token"}.get(name, name)


def _has(path: str, kind: str) -> bool:
    return any(_kind(name) == kind for name in VALID[path])


async def _chunks(total: int) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        yield b"a" * 1024
        sent += 1024


def _wrong_type(path: str) -> set[int]:
    return {422}


LONG_PASSWORD = "p" * 5_000
CASES: list[Case] = [
    Case("malformed json", raw(b'{"email": "a@b.c", '), fixed(422)),
    Case("truncated json", raw(b"{"), fixed(422)),
    Case("not json", raw(b"email=a@b.c&password=x"), fixed(422)),
    Case("json array", raw(b'["email", "password"]'), fixed(422)),
    Case("json string", raw(b'"victim@example.com"'), fixed(422)),
    Case("json number", raw(b"12345"), fixed(422)),
    Case("json true", raw(b"true"), fixed(422)),
    Case("empty object", raw(b"{}"), fixed(422)),
    Case(
        "invalid utf-8",
        raw(b'{"email": "\xff\xfe\xc3(", "password": "\x80abcdefgh"}'),
        fixed(400, 422),
    ),
    Case("deeply nested arrays", raw(b"[" * 10_000), fixed(400, 413, 422)),
    Case("deeply nested objects", raw(b'{"a":' * 2_500 + b"1" + b"}" * 2_500), fixed(400, 422)),
    Case("balanced nesting", raw(b"[" * 5_000 + b"]" * 5_000), fixed(400, 422)),
    Case("body over the cap", raw(b'{"email": "' + b"a" * MAX_BODY + b'"}'), fixed(413)),
    Case(
        "chunked body over the cap",
        lambda _p: {"content": _chunks(MAX_BODY + 4096), "headers": JSON},
        fixed(413),
    ),
    Case("non-numeric content-length", raw(b"{}", {"content-length": "abc"}), fixed(400)),
    Case("negative content-length", raw(b"{}", {"content-length": "-1"}), fixed(400)),
    Case(
        "form-encoded",
        lambda p: {"data": VALID[p]},
        fixed(400, 415, 422),
    ),
    Case(
        "text/plain json",
        lambda p: {
            "content": json.dumps(VALID[p]).encode(),
            "headers": {"content-type": "text/plain"},
        },
        fixed(400, 415, 422),
    ),
    # Wrong types for string fields.
    *(
        Case(f"{kind} as {label}", with_field(kind, value), _wrong_type, kind=kind)
        for kind in ("email", "password", "token")
        for label, value in (
            ("number", 12345),
            ("float", 1.5),
            ("null", None),
            ("bool", True),
            ("list", ["victim@example.com"]),
            ("object", {"$ne": ""}),
        )
    ),
    # Missing fields.
    *(
        Case(f"missing {kind}", without(kind), _wrong_type, kind=kind)
        for kind in ("email", "password", "token")
    ),
    # Hostile strings.
    Case("email with header injection", with_field("email", f"{VICTIM}\r\nBcc: x@y"), kind="email"),
    Case("email with bare LF", with_field("email", f"{VICTIM}\nBcc: x@y"), kind="email"),
    Case("email with NUL", with_field("email", "vic\x00tim@example.com"), kind="email"),
    Case(
        "email lone surrogate", with_raw_field("email", '"vic\\ud800tim@example.com"'), kind="email"
    ),
    Case("very long email", with_field("email", "a" * 5_000 + "@example.com"), kind="email"),
    Case("very long domain", with_field("email", "a@" + "b" * 300 + ".com"), kind="email"),
    Case("empty email", with_field("email", ""), kind="email"),
    # NFKC makes each U+FDFA 18 characters: once a 372-character key, a 500 on PostgreSQL
    # (issue 10, F11); now refused as a new address (compatibility characters).
    Case(
        "email NFKC-expanding past the column",
        with_field("email", "\ufdfa" * 20 + "@example.com"),
        kind="email",
    ),
    Case(
        "password lone surrogates",
        with_raw_field("password", '"' + "\\ud800" * 10 + '"'),
        kind="password",
    ),
    Case(
        "password unpaired low surrogate",
        with_raw_field("password", '"abcdefgh\\udfff"'),
        kind="password",
    ),
    Case(
        "very long password",
        with_field("password", LONG_PASSWORD),
        secrets=[LONG_PASSWORD],
        kind="password",
    ),
    Case(
        "password over 72 bytes",
        with_field("password", "é" * 40),
        secrets=["é" * 40],
        kind="password",
    ),
    Case("token with NUL", with_field("token", "tok\x00en-" + "A" * 40), kind="token"),
    Case("token with header injection", with_field("token", "x\r\nSet-Cookie: a=b"), kind="token"),
    Case("token lone surrogate", with_raw_field("token", '"\\ud800\\udc00\\ud800"'), kind="token"),
    Case("very long token", with_field("token", "A" * 10_000), kind="token"),
    Case("empty token", with_field("token", ""), kind="token"),
]


def _applies(case: Case, path: str) -> bool:
    return case.kind is None or _has(path, case.kind)


def _expected(case: Case, path: str) -> set[int]:
    return case.expect(path) if case.expect is not None else SEMANTIC_REFUSAL[path]


def assert_contract_error(response: httpx.Response, what: str) -> None:
    assert response.headers.get("x-content-type-options") == "nosniff", what
    body = response.json()
    if response.status_code == 422:
        assert set(body) == {"detail"}, what
        assert isinstance(body["detail"], list), what
        assert body["detail"], what
        for item in body["detail"]:
            assert "input" not in item, what
            assert "ctx" not in item, what
            assert isinstance(item["msg"], str), what
    elif response.status_code >= 400:
        assert set(body) == {"detail", "code"}, what
        assert isinstance(body["detail"], str), what
        assert isinstance(body["code"], str), what
        assert body["code"].replace("_", "").isalpha(), what
        assert body["code"] == body["code"].lower(), what


@pytest.mark.parametrize("path", ENDPOINTS)
async def test_hostile_bodies_are_refused_and_change_nothing(
    make_client: AppFactory, backend: Backend, outbox: Outbox, path: str
) -> None:
    async with make_client(password_reset_send_fn=outbox, email_verify_send_fn=outbox) as client:
        await register(client, VICTIM)
        tokens = await login(client, VICTIM)
        client.cookies.clear()  # no cookie may stand in for a body that was refused
        before = await count_users(backend)
        assert before == 1

        tried = 0
        for case in CASES:
            if not _applies(case, path):
                continue
            tried += 1
            what = f"{path} / {case.name}"
            response = await client.post(path, **case.request(path))
            assert response.status_code != 500, what
            assert response.status_code in _expected(case, path), (
                what,
                response.status_code,
                response.text[:300],
            )
            assert_contract_error(response, what)
            for secret in case.secrets:
                assert secret not in response.text, what
            if response.status_code == 200:
                assert set(response.json()) == {"message"}, what
            client.cookies.clear()
        assert tried >= 30

        # Nothing changed: no account appeared, no mail went out, the victim's session
        # and password still work, and the hostile emails' clean form is still free.
        await outbox.wait_for(0)
        assert outbox.sent == []
        assert await count_users(backend) == before
        me = await client.get("/auth/me", headers=bearer(tokens["access_token"]))
        assert me.status_code == 200
        assert me.json()["email"] == VICTIM
        await login(client, VICTIM)
        await register(client, "new@example.com")
        assert await count_users(backend) == before + 1


@pytest.mark.parametrize("path", ENDPOINTS)
async def test_every_post_endpoint_survives_garbage_headers(
    make_client: AppFactory, outbox: Outbox, path: str
) -> None:
    body = json.dumps(VALID[path]).encode()
    async with make_client(password_reset_send_fn=outbox) as client:
        for headers in (
            {"content-type": "application/json; charset=latin-1"},
            {"content-type": "application/json", "content-encoding": "gzip"},
            {"content-type": "application/x-www-form-urlencoded"},
            {"content-type": "multipart/form-data; boundary=x"},
            {"content-type": ""},
        ):
            response = await client.post(path, content=body, headers=headers)
            assert response.status_code < 500, (path, headers, response.text)
            assert_contract_error(response, f"{path} {headers}")


async def test_bad_csrf_header_bytes_are_refused_not_500(client: httpx.AsyncClient) -> None:
    """A non-ASCII X-CSRF-Token equal to its cookie: 403, not a crash in the comparison."""
    await register(client)
    await login(client)
    value = b"\xe9t\xe9.\xff\xfe"
    cookie_header = b"; ".join(
        [f"{k}={v}".encode() for k, v in client.cookies.items() if k != "svc_csrf_token"]
        + [b"svc_csrf_token=" + value]
    )
    client.cookies.clear()
    for path in ("/auth/refresh", "/auth/email-verification"):
        response = await client.post(
            path, headers=[(b"cookie", cookie_header), (b"x-csrf-token", value)]
        )
        assert response.status_code in (403, 501), (path, response.text)
        assert_contract_error(response, path)


# --- bodies that are not JSON objects, duplicate keys, duplicate cookies, huge headers ---


async def test_json_bodies_only(client: httpx.AsyncClient) -> None:
    body = b'{"email": "ann@example.com", "password": "correct horse battery"}'
    for content_type in (None, "text/plain", "application/x-www-form-urlencoded"):
        headers = {"Content-Type": content_type} if content_type else {}
        response = await client.post("/auth/register", content=body, headers=headers)
        assert response.status_code == 422, content_type
    await register(client)  # none of them created the account


async def test_duplicate_json_keys_are_refused(client: httpx.AsyncClient, backend: Backend) -> None:
    body = (
        b'{"email": "ann@example.com", "email": "bob@example.com", '
        b'"password": "correct horse battery"}'
    )
    response = await client.post(
        "/auth/register", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert await count_users(backend) == 0


async def test_duplicated_auth_cookies_are_not_trusted(client: httpx.AsyncClient) -> None:
    await register(client)
    tokens = await login(client)
    client.cookies.clear()
    access = tokens["access_token"]
    both = f"svc_access_token={access}; svc_access_token=planted"
    assert (await client.get("/auth/me", headers={"Cookie": both})).status_code == 401
    reversed_ = f"svc_access_token=planted; svc_access_token={access}"
    assert (await client.get("/auth/me", headers={"Cookie": reversed_})).status_code == 401
    assert (
        await client.get("/auth/me", headers={"Cookie": f"svc_access_token={access}"})
    ).status_code == 200
    refresh = tokens["refresh_token"]
    response = await client.post(
        "/auth/refresh",
        headers={"Cookie": f"svc_refresh_token=planted; svc_refresh_token={refresh}"},
    )
    assert response.status_code == 401
    # The real token was not spent by that request.
    response = await client.post("/auth/refresh", json={"refresh_token": refresh})
    assert response.status_code == 200


@pytest.mark.parametrize(
    "separator",
    [b" ", b"\t", b"\xa0", b"\x85", b" \xa0 "],
    ids=["space", "tab", "nbsp", "nel", "mixed"],
)
async def test_a_name_spelled_with_trailing_whitespace_is_a_duplicate(
    client: httpx.AsyncClient, separator: bytes
) -> None:
    """`svc_access_token=V; svc_access_token =A`: the reader strips the name (U+00A0 and U+0085
    too), so the duplicate check must count it as the same name: neither is used."""
    await register(client)
    access = (await login(client))["access_token"].encode()
    client.cookies.clear()
    for cookie in (
        b"svc_access_token=planted; svc_access_token" + separator + b"=" + access,
        b"svc_access_token" + separator + b"=" + access + b"; svc_access_token=planted",
    ):
        me = await client.get("/auth/me", headers=[(b"cookie", cookie)])
        assert me.status_code == 401, cookie
    alone = b"svc_access_token" + separator + b"=" + access
    assert (await client.get("/auth/me", headers=[(b"cookie", alone)])).status_code == 200


async def test_one_cookie_name_in_two_cookie_headers_is_a_duplicate(
    client: httpx.AsyncClient,
) -> None:
    await register(client)
    tokens = await login(client)
    client.cookies.clear()
    access, refresh = tokens["access_token"], tokens["refresh_token"]
    me = await client.get(
        "/auth/me",
        headers=[("cookie", "svc_access_token=planted"), ("cookie", f"svc_access_token={access}")],
    )
    assert me.status_code == 401
    response = await client.post(
        "/auth/refresh",
        headers=[
            ("cookie", "svc_refresh_token=planted"),
            ("cookie", f"svc_refresh_token ={refresh}"),
        ],
    )
    assert response.status_code == 401
    # The real token was not spent by that request.
    response = await client.post("/auth/refresh", json={"refresh_token": refresh})
    assert response.status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer " + "a" * 100_000},
        {"Cookie": "svc_access_token=" + "b" * 100_000},
        {"X-CSRF-Token": "c" * 100_000, "Cookie": "svc_csrf_token=" + "c" * 100_000},
        {"X-Request-ID": "d" * 100_000},
        {"User-Agent": "e" * 100_000},
    ],
)
async def test_huge_headers_are_a_clean_4xx(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    me = await client.get("/auth/me", headers=headers)
    assert me.status_code == 401
    response = await client.post("/auth/email-verification", headers=headers)
    assert response.status_code in (401, 403)
    response = await client.post("/auth/refresh", headers=headers)
    assert response.status_code in (401, 403)
