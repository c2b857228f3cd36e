"""The uniqueness key holds for email changes as for registration (Hypothesis, through HTTP,
on both backends): asking to move to an address that is another account's mailbox (in any
case) answers 409, a look-alike that is a different mailbox is never refused as taken, and
nothing answers anything but 202/409/422.

Bounded and reproducible like the other properties (few examples, derandomized)."""

from __future__ import annotations

import asyncio
import itertools

from email_validator import EmailNotValidError
from hypothesis import given, note
from hypothesis import strategies as st

from authgate import create_app
from authgate.factors.emails import EmailProblem
from tests.helpers import (
    ADDRESSES,
    HTTP,
    PASSWORD,
    Backend,
    Outbox,
    bearer,
    look_alike,
    make_config,
    mixed_case,
    on_loop,
    post_json,
    running,
    same_mailbox,
)


def _same(a: str, b: str) -> bool | None:
    """The documented rule, or None when `b` is no address at all."""
    try:
        return same_mailbox(a, b)
    except (EmailNotValidError, EmailProblem):
        return None


async def test_email_change_respects_the_uniqueness_key(backend: Backend, outbox: Outbox) -> None:
    app = create_app(make_config(backend, email_change_send_fn=outbox))
    mover = (f"mover{n}@example.com" for n in itertools.count())
    async with running(app) as client:
        loop = asyncio.get_running_loop()

        @HTTP
        @given(st.data(), ADDRESSES)
        def prop(data: st.DataObject, address: str) -> None:
            holder = on_loop(
                loop, post_json(client, "/auth/register", {"email": address, "password": PASSWORD})
            )
            if holder.status_code != 201:
                return  # an address registration refuses (or one taken by an earlier example)
            me = next(mover)
            on_loop(loop, post_json(client, "/auth/register", {"email": me, "password": PASSWORD}))
            tokens = on_loop(
                loop, post_json(client, "/auth/login", {"email": me, "password": PASSWORD})
            ).json()
            for wanted in (
                data.draw(mixed_case(address), label="mixed case"),
                data.draw(look_alike(address), label="look-alike"),
            ):
                note(f"holder={address!r} wanted={wanted!r}")
                client.cookies.clear()
                response = on_loop(
                    loop,
                    client.post(
                        "/auth/email-change",
                        json={"new_email": wanted, "password": PASSWORD},
                        headers=bearer(tokens["access_token"]),
                    ),
                )
                same = _same(address, wanted)
                if same:
                    assert response.status_code == 409, response.text
                else:
                    assert response.status_code in (202, 422), response.text

        await asyncio.to_thread(prop)
