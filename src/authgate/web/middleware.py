"""`RequestGuard`: the request id, the event context and the body size cap, for every request."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Sequence
from ipaddress import IPv4Network, IPv6Network

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from authgate import events
from authgate.errors import PayloadTooLarge
from authgate.metrics import Metrics
from authgate.web.handlers import error_response
from authgate.web.transport import client_address

__all__ = ["RequestGuard"]

#: Methods whose body nothing here reads (RFC 9110 §9.3.1: content in a GET has no meaning).
_BODILESS = frozenset({"GET", "HEAD", "OPTIONS"})
#: The methods counted by name; any other (a client may send any token) counts as "OTHER".
_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"})
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestGuard:
    """Pure ASGI middleware: request id and event context, and the body size cap.

    The cap is checked on `Content-Length` before anything is read; then a request that can
    carry a body has it read, up to the cap, before the application runs, and replayed to it.
    One path serves a declared and an undeclared (chunked) length alike, and an oversized
    body is always a clean 413, never whatever the framework makes of an error mid-parse.
    GET, HEAD and OPTIONS pass through untouched: the hottest route (GET /me) pays nothing.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        trusted_proxies: Sequence[IPv4Network | IPv6Network] = (),
        sinks: Sequence[events.Sink] = (),
        metrics: Metrics | None = None,
    ) -> None:
        """`sinks`: where the events of this application's requests also go (the list
        itself is kept: sinks added later are heard too). `metrics`: where each request's
        route template, method, status and duration are counted (None: nowhere)."""
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.trusted_proxies = tuple(trusted_proxies)
        self.sinks = sinks
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server answers when the application raised before answering
        # One pass over the headers (ASGI gives their names in lower case).
        given_id = user_agent_raw = b""
        length: bytes | None = None
        forwarded: list[str] = []
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                given_id = value
            elif name == b"user-agent":
                user_agent_raw = value
            elif name == b"content-length":
                length = value
            elif name == b"x-forwarded-for":
                forwarded.append(value.decode("latin-1"))
        given = given_id.decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else secrets.token_hex(8)
        client = scope.get("client")
        ip = client_address(client[0] if client else None, forwarded, self.trusted_proxies)
        scope.setdefault("state", {})["authgate_client_ip"] = ip
        user_agent = user_agent_raw.decode("latin-1")
        token = events.request_context.set(
            events.RequestContext(request_id, ip, user_agent or None, self.sinks)
        )

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                extra = [
                    (b"x-request-id", request_id.encode()),
                    (b"x-content-type-options", b"nosniff"),
                ]
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        try:
            if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
                response = (
                    _too_large()
                    if length.isdigit()
                    else error_response(400, "Invalid Content-Length header.", "bad_request")
                )
                await response(scope, receive, send_with_id)
                return
            if scope["method"] in _BODILESS:
                await self.app(scope, receive, send_with_id)
                return
            buffered: list[Message] = []
            size = 0
            while True:
                message = await receive()
                buffered.append(message)
                if message["type"] != "http.request":
                    break
                size += len(message.get("body", b""))
                if size > self.max_body_bytes:
                    await _too_large()(scope, receive, send_with_id)
                    return
                if not message.get("more_body", False):
                    break

            async def replay() -> Message:
                return buffered.pop(0) if buffered else await receive()

            await self.app(scope, replay, send_with_id)
        finally:
            events.request_context.reset(token)
            if self.metrics is not None:
                # The route's template (`/auth/sessions/{session_id}`), never the raw path:
                # the router leaves it in the scope; no route matched is "other".
                route = getattr(scope.get("route"), "path", None) or "other"
                method = scope["method"] if scope["method"] in _METHODS else "OTHER"
                self.metrics.record_request(route, method, status, time.perf_counter() - started)


def _too_large() -> JSONResponse:
    err = PayloadTooLarge()
    return error_response(err.status_code, err.detail, err.code)
