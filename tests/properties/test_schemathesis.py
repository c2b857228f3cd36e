"""Schemathesis against authgate's own OpenAPI document: every operation, positive and negative
data, on both backends. No response is ever a 5xx, and every response matches what
`/openapi.json` documents (status code, content type, headers, body schema).

How it runs: the app's lifespan (migrations) runs in the test's event loop through `running()`,
and the document is fetched from the running app's `/openapi.json`. (`schemathesis.openapi.
from_asgi` is not used: it starts the lifespan itself, on schemathesis' own event-loop thread,
and keeps it alive until the interpreter exits, which would leave the app's database pool open
across the fixture's teardown.) Hypothesis drives the generation in a worker thread; each case is
sent through the test's httpx client on the event loop and checked with schemathesis'
`validate_response`. Bounded: a few examples per operation, derandomized, no deadline.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, given, note, settings
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from schemathesis.schemas import APIOperation

from authgate import create_app
from tests.helpers import Backend, Outbox, bearer, login, make_config, register, running

MAX_EXAMPLES = 20
#: Derandomized (a fixed seed per test function) and without the example database, so CI
#: generates the same requests on every run.
SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    # Schema-driven strategies are large and filter a little; that is expected here.
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)
BASE_URL = "https://testserver"
#: The operations that need an access token; the rest of the API is public.
PROTECTED = {"GET /auth/me", "POST /auth/email-verification"}

#: An operation of any schema, and a case generated for one.
Operation = APIOperation[Any, Any, Any, Any]
Case = schemathesis.Case[Operation]

CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_headers_conformance,
    schemathesis.checks.response_schema_conformance,
]


def _app(backend: Backend, outbox: Outbox) -> Any:
    # rate_limits off: a 429 would be correct but would hide what the fuzzer is after. The
    # senders make the email endpoints do their work rather than answer 501.
    return create_app(
        make_config(
            backend,
            rate_limits=False,
            password_reset_send_fn=outbox,
            email_verify_send_fn=outbox,
        )
    )


class Sender:
    """Sends schemathesis cases, from Hypothesis' worker thread, through the event loop's client."""

    def __init__(self, client: httpx.AsyncClient, loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self.loop = loop
        #: operation label -> status code -> how many responses
        self.sent: dict[str, dict[int, int]] = {}

    async def _send(self, request: dict[str, Any]) -> httpx.Response:
        self.client.cookies.clear()  # every case stands alone: no session from an earlier login
        return await self.client.request(**request)

    def send(self, case: Case, headers: dict[str, str]) -> httpx.Response:
        kwargs = case.as_transport_kwargs(base_url=BASE_URL, headers=headers)
        assert not kwargs.get("cookies"), "the schema declares no cookie parameters"
        request: dict[str, Any] = {
            "method": kwargs["method"],
            "url": kwargs["url"],
            "headers": kwargs["headers"],
            "params": kwargs.get("params"),
        }
        if "json" in kwargs:
            # What `requests` would send: ASCII JSON (lone surrogates as \uXXXX escapes).
            request["content"] = json.dumps(kwargs["json"]).encode()
        elif "data" in kwargs:
            request["content"] = kwargs["data"]
        future = asyncio.run_coroutine_threadsafe(self._send(request), self.loop)
        response = future.result()
        statuses = self.sent.setdefault(case.operation.label, {})
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        return response


def fuzz_operation(
    operation: Operation,
    mode: GenerationMode,
    sender: Sender,
    headers: dict[str, str],
) -> None:
    """Run Hypothesis over one operation (blocking: call it in a worker thread)."""

    @SETTINGS
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case: Case) -> None:
        # Schemathesis turns off Hypothesis' printing of failing arguments; say what was sent.
        note(case.as_curl_command(headers=headers, base_url=BASE_URL))
        response = sender.send(case, headers)
        case.validate_response(response, checks=CHECKS, headers=headers)

    check()


async def fuzz_schema(
    client: httpx.AsyncClient,
    mode: GenerationMode,
    headers: dict[str, str],
    select: Callable[[Operation], bool],
) -> Sender:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    schema = schemathesis.openapi.from_dict(response.json(), config=schemathesis.Config())
    operations: list[Operation] = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result.err()
        operations.append(result.ok())
    sender = Sender(client, asyncio.get_running_loop())
    selected = {op.label for op in operations if select(op)}
    for operation in operations:
        if operation.label in selected:
            await asyncio.to_thread(fuzz_operation, operation, mode, sender, headers)
    # Every selected operation was really exercised (none generated nothing).
    assert set(sender.sent) == selected, sorted(selected - set(sender.sent))
    return sender


def takes_input(operation: Operation) -> bool:
    """Whether the operation has anything to send wrong: a body or a query/header parameter.
    (A path parameter that is any string, the session id of DELETE /auth/sessions/{id}, cannot
    be made invalid: every string is one, and an unknown one is a 404 the valid-data run sees.)"""
    return bool(list(operation.body)) or any(
        parameter.location != "path" for parameter in operation.iter_parameters()
    )


async def test_every_operation_valid_data(backend: Backend, outbox: Outbox) -> None:
    """Every operation with schema-valid data and no credentials: the protected ones must give
    their documented 401, the rest their documented successes and refusals."""
    async with running(_app(backend, outbox)) as client:
        sender = await fuzz_schema(client, GenerationMode.POSITIVE, {}, select=lambda _op: True)
    # The whole document: interface.md §4's nine /auth operations and the two probes at least.
    assert len(sender.sent) >= 11, sorted(sender.sent)
    for label in PROTECTED:
        assert set(sender.sent[label]) == {401}, (label, sender.sent[label])


async def test_every_operation_invalid_data(backend: Backend, outbox: Outbox) -> None:
    """Every operation that takes input, with data that breaks its schema (wrong types, missing
    fields, NUL bytes, overlong strings...): refused with a documented 4xx, never a 5xx.
    (GET /auth/me, POST /auth/email-verification and the probes take no input: there is
    nothing to make invalid, and Hypothesis would find the strategy unsatisfiable.)"""
    async with running(_app(backend, outbox)) as client:
        sender = await fuzz_schema(client, GenerationMode.NEGATIVE, {}, select=takes_input)
    # The seven /auth operations with a JSON body at least.
    assert len(sender.sent) >= 7, sorted(sender.sent)


async def test_protected_operations_with_a_token(backend: Backend, outbox: Outbox) -> None:
    """GET /auth/me and POST /auth/email-verification with a valid bearer token: the
    authenticated paths, not only their 401. (Valid data only: they take no input.)"""
    async with running(_app(backend, outbox)) as client:
        await register(client)
        token = (await login(client))["access_token"]
        await fuzz_schema(
            client, GenerationMode.POSITIVE, bearer(token), select=lambda op: op.label in PROTECTED
        )
        me = await client.get("/auth/me", headers=bearer(token))
        assert me.status_code == 200, "the token stayed good through the run"
    # The authenticated path really ran: verification emails went out to the account.
    assert outbox.sent
    assert {email for email, _token in outbox.sent} == {"ann@example.com"}
