"""Two password properties through HTTP, on both backends (Hypothesis): an NFKC-equivalent
password logs in, and no password text makes registration answer anything but 201/409/422.

Hypothesis drives from a worker thread; each request runs on the test's event loop, where the
app (and its lifespan) lives.

Bounded and reproducible: few examples, derandomized, no example database, no deadline.
Each property `note`s its inputs: schemathesis' pytest plugin (loaded in this session) turns
off Hypothesis' printing of the failing arguments, so a failure would otherwise not say which
input broke it.
"""

from __future__ import annotations

import asyncio
import itertools
import string

from hypothesis import given, note
from hypothesis import strategies as st

from authgate import create_app
from authgate.factors.password_rules import normalise, password_problem
from tests.helpers import (
    ANY_TEXT,
    HTTP,
    Backend,
    acceptable,
    make_config,
    nfkc_variant,
    on_loop,
    post_json,
    running,
)

PLAIN_PASSWORDS = st.text(
    st.sampled_from(string.ascii_letters + string.digits + "éüñ"), min_size=8, max_size=24
).filter(lambda p: password_problem(normalise(p)) is None)


async def test_login_with_an_nfkc_equivalent_password(backend: Backend) -> None:
    app = create_app(make_config(backend, rate_limits=False))
    emails = (f"nfkc{n}@example.com" for n in itertools.count())
    async with running(app) as client:
        loop = asyncio.get_running_loop()

        @HTTP
        @given(st.data(), PLAIN_PASSWORDS, st.booleans())
        def prop(data: st.DataObject, password: str, variant_first: bool) -> None:
            variant = data.draw(nfkc_variant(password).filter(lambda v: v != password))
            note(f"password={password!r} variant={variant!r} variant_first={variant_first}")
            at_register, at_login = (variant, password) if variant_first else (password, variant)
            email = next(emails)
            body = {"email": email, "password": at_register}
            registered = on_loop(loop, post_json(client, "/auth/register", body))
            assert registered.status_code == 201, registered.text
            body = {"email": email, "password": at_login}
            logged_in = on_loop(loop, post_json(client, "/auth/login", body))
            assert logged_in.status_code == 200, logged_in.text

        await asyncio.to_thread(prop)


async def test_register_answers_201_409_or_422_to_any_password(backend: Backend) -> None:
    app = create_app(make_config(backend, rate_limits=False))
    emails = (f"anypw{n}@example.com" for n in itertools.count())
    async with running(app) as client:
        loop = asyncio.get_running_loop()

        @HTTP
        @given(st.one_of(st.text(), ANY_TEXT))
        def prop(password: str) -> None:
            note(f"password={password!r}")
            body = {"email": next(emails), "password": password}
            response = on_loop(loop, post_json(client, "/auth/register", body))
            assert response.status_code in (201, 409, 422), response.text
            # A fresh email each time: never 409, and 201 exactly when the rules accept it.
            expected = 201 if len(password) <= 1024 and acceptable(normalise(password)) else 422
            assert response.status_code == expected, response.text

        await asyncio.to_thread(prop)
