"""`authgate serve`'s HTTP/1.1 protocol: uvicorn's, with the limits uvicorn lacks.

uvicorn closes a kept-alive connection that stays idle (`timeout_keep_alive`), but it has no
timeout for a connection that never sends a complete request: one byte every few seconds, or
nothing at all after connecting, holds a socket and a slot for ever (slowloris), and a body
that stops half-way holds a request task too. Its httptools parser also accepts headers of any
size. `GuardedHttpToolsProtocol` adds both limits:

- a read timeout: from the connection's opening, and from the first byte of each further
  request on it, the whole request (line, headers, body) must arrive within `read_timeout`
  seconds, else the connection is closed (with `408` when no part of the request reached the
  application yet);
- a head limit: a request line plus headers over `max_header_bytes` gets `431` and the
  connection closes.

A reverse proxy with its own timeouts still belongs in front (README).
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["GuardedHttpToolsProtocol", "protocol_factory"]


def _response(status: bytes) -> bytes:
    return b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(
        self,
        *args: Any,
        read_timeout: float,
        max_header_bytes: int,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._read_timeout = read_timeout
        self._max_header_bytes = max_header_bytes
        self._read_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._head_complete = False

    # --- the read timeout ------------------------------------------------------------

    def _arm(self) -> None:
        if self._read_timer is None:
            self._read_timer = self.loop.call_later(self._read_timeout, self._on_read_timeout)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _on_read_timeout(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        if not self._head_complete and (self.cycle is None or self.cycle.response_complete):
            # Nothing of this request reached the application: say why before closing.
            self.transport.write(_response(b"408 Request Timeout"))
        self.logger.info("closing a connection that did not send a whole request in time")
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # Bytes after a complete request start the next one (also stray CRLFs, which the
        # parser skips without starting a message): its clock runs from here.
        self._arm()
        super().data_received(data)
        if self._head_complete or self.transport.is_closing():
            return
        # All of `data` went into a head that is still unfinished (httptools keeps a header's
        # pieces until it ends, so the limit is checked on what arrived, not on callbacks).
        self._head_bytes += len(data)
        if self._head_bytes > self._max_header_bytes:
            self.logger.warning("request line and headers over the limit; answered 431")
            self.transport.write(_response(b"431 Request Header Fields Too Large"))
            self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._head_complete = False

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def on_headers_complete(self) -> None:
        self._head_complete = True
        super().on_headers_complete()


def protocol_factory(*, read_timeout: float, max_header_bytes: int) -> Any:
    """What `uvicorn.run(http=...)` takes: a picklable callable (workers are spawned)."""
    return functools.partial(
        GuardedHttpToolsProtocol, read_timeout=read_timeout, max_header_bytes=max_header_bytes
    )
