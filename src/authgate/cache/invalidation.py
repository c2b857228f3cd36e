"""Invalidation across workers: publish and wait for acknowledgements; subscribe and apply.

- Every revocation and user change is PUBLISHed on the deployment's channel after the Redis
  write, and the writer waits (up to `ack_timeout`) until every subscribed worker has
  confirmed that it dropped the entry; only then does the request that revoked answer. So
  when logout answers, no worker anywhere will accept that session's access token again.
- A worker applies a message in the socket's read callback itself, before the event loop runs
  any request handler, so even a worker that was stalled drops its entries before it serves.
- The subscriber pings every `PING_INTERVAL` with its send time as payload, and a pong (which
  Redis sends after every message published before the ping) renews the local copy's lease
  from that send time. The lease (`local.LEASE`) is shorter than a writer's acknowledgement
  wait, so a worker that did not confirm a revocation in time has stopped using its copy by
  the time the writer gives up. Bytes that merely arrive (a lagging stream) renew nothing.
- When the subscription drops, the copy is cleared until a replay begun after the next
  subscribe has completed (`sweep.Sweeper`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from authgate.cache.entries import NO_ACK, Keys, message
from authgate.cache.local import LEASE, LocalState
from authgate.cache.sweep import Sweeper

__all__ = ["PING_INTERVAL", "SUBSCRIBER_NAME", "Publisher", "Subscriber"]

logger = logging.getLogger("authgate")

#: The subscriber pings this often; each pong carries the ping's send time.
PING_INTERVAL = 0.25
SUBSCRIBER_NAME = "authgate-invalidations"
_PING_TAG = "authgate-ping:"


class Publisher:
    """The writer's side: the Redis entries and the message in one round trip, then the
    acknowledgements."""

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        sweeper: Sweeper,
        *,
        op_timeout: float,
        ack_timeout: float,
    ) -> None:
        self._redis = client
        self._keys = keys
        self._sweeper = sweeper
        self._op_timeout = op_timeout
        self.ack_timeout = ack_timeout

    async def invalidate(self, kind: str, ids: list[str], write: Callable[[Pipeline], Any]) -> None:
        """`write` the Redis entries, publish `kind ack_key ids...` in the same round trip,
        then wait for the subscribed workers' acknowledgements."""
        ack_key = self._keys.new_ack()
        async with (
            asyncio.timeout(self._op_timeout),
            self._redis.pipeline(transaction=False) as pipe,
        ):
            write(pipe)
            pipe.publish(self._keys.channel, message(kind, ack_key, ids))
            receivers = (await pipe.execute())[-1]
        if kind == "s":
            self._sweeper.remember_sessions(ids)
        await self._await_acks(ack_key, int(receivers))

    async def _await_acks(self, ack_key: str, receivers: int) -> None:
        """Wait until `receivers` workers confirmed the invalidation, at most `ack_timeout`."""
        confirmed = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ack_timeout
        try:
            while confirmed < receivers:
                left = deadline - loop.time()
                if left <= 0:
                    break
                async with asyncio.timeout(left + self._op_timeout):
                    popped = await self._redis.blpop([ack_key], timeout=left)
                if popped is None:
                    break
                confirmed += 1
        finally:
            if confirmed < receivers:
                logger.warning(
                    "state cache: %d of %d worker(s) did not confirm an invalidation within "
                    "%.1f s; their copies stopped within their %.2f s lease",
                    receivers - confirmed,
                    receivers,
                    self.ack_timeout,
                    LEASE,
                )


class _Invalidations(asyncio.Protocol):
    """The subscription connection's protocol: messages are applied in the read callback.

    Receiving bytes proves nothing about how current they are; only pongs renew the lease
    (in `Subscriber.on_message`)."""

    def __init__(self, on_message: Callable[[Any], None], on_lost: Callable[[], None]) -> None:
        self._reader = hiredis.Reader()
        self._on_message = on_message
        self._on_lost = on_lost
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (message := self._reader.gets()) is not False:
            self._on_message(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost()
        if not self.lost.done():
            self.lost.set_result(None)


class Subscriber:
    """The reader's side: one subscription per worker that keeps `local` honest."""

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        local: LocalState,
        sweeper: Sweeper,
        *,
        op_timeout: float,
    ) -> None:
        self._redis = client
        self._keys = keys
        self._local = local
        self._sweeper = sweeper
        self._op_timeout = op_timeout
        self._acks: set[asyncio.Task[None]] = set()

    async def drain(self) -> None:
        """Let the acknowledgements already begun finish (after the subscription ended)."""
        for ack in list(self._acks):
            with contextlib.suppress(asyncio.CancelledError, RedisError, TimeoutError):
                await ack

    def on_message(self, message: Any) -> None:
        if isinstance(message, list) and len(message) == 2 and message[0] == b"pong":
            self._on_pong(message[1])
            return
        if isinstance(message, bytes):  # RESP3 answers PING <payload> with the payload
            self._on_pong(message)
            return
        if not isinstance(message, list) or len(message) < 3:
            return
        kind = message[0]
        if kind == b"subscribe":
            # Replay before trusting the copy: the sweep opens it (`Sweeper.maintain_once`).
            self._local.subscribed()
            self._sweeper.wake()
            return
        if kind != b"message" or not isinstance(message[2], bytes):
            return  # something this subscriber did not ask for
        what, ack_key, *ids = message[2].decode().split(" ")
        if what == "s":
            self._local.drop_sessions(ids)
            self._sweeper.remember_sessions(ids)  # the publisher wrote the tombstones first
        elif what == "u":
            for uid in ids:
                self._local.drop_user(int(uid))
        if ack_key == NO_ACK:
            return
        task = asyncio.get_running_loop().create_task(self._ack(ack_key))
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    def _on_pong(self, payload: Any) -> None:
        """A pong proves the subscription was current when its ping was sent."""
        if not isinstance(payload, bytes):
            return
        text = payload.decode("ascii", "replace")
        if not text.startswith(_PING_TAG):
            return
        try:
            sent_at = float(text[len(_PING_TAG) :])
        except ValueError:
            return
        if math.isfinite(sent_at) and sent_at <= self._local.now():
            self._local.heard(sent_at)

    def on_lost(self) -> None:
        self._local.unsubscribed()

    async def _ack(self, ack_key: str) -> None:
        try:
            async with (
                asyncio.timeout(self._op_timeout),
                self._redis.pipeline(transaction=False) as pipe,
            ):
                pipe.rpush(ack_key, 1)
                pipe.expire(ack_key, 30)
                await pipe.execute()
        except (RedisError, TimeoutError) as exc:
            logger.warning(
                "state cache: could not confirm an invalidation (%s)", type(exc).__name__
            )

    async def run_forever(self) -> None:
        backoff = 0.25
        while True:
            try:
                await self._subscribe_once()
                backoff = 0.25
            except (RedisError, OSError, TimeoutError) as exc:
                logger.warning(
                    "state cache: invalidation subscription unavailable (%s); this worker reads "
                    "Redis on every request until it is back",
                    type(exc).__name__,
                )
            self.on_lost()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _subscribe_once(self) -> None:
        # redis-py opens the connection (TLS, AUTH, HELLO, client name as CACHE_URL says); then
        # the transport is handed to `_Invalidations`, so messages are applied in the read
        # callback rather than by a task that may run after a request handler.
        conn = self._redis.connection_pool.make_connection()  # type: ignore[no-untyped-call]
        try:
            async with asyncio.timeout(self._op_timeout):
                await conn.connect()
                # Named, so an operator sees it in CLIENT LIST (one per worker).
                await conn.send_command("CLIENT", "SETNAME", SUBSCRIBER_NAME)
                await conn.read_response()
            writer = getattr(conn, "_writer", None)
            if writer is None:  # pragma: no cover - a redis-py without the stream writer
                raise RedisError("cannot take over the subscription connection")
            transport = writer.transport
            protocol = _Invalidations(self.on_message, self.on_lost)
            transport.set_protocol(protocol)

            def ping() -> bytes:
                # The payload is this worker's monotonic time: the pong says "current as of".
                payload = f"{_PING_TAG}{self._local.now():.6f}"
                return b"".join(conn.pack_command("PING", payload))

            transport.write(b"".join(conn.pack_command("SUBSCRIBE", self._keys.channel)) + ping())
            while not protocol.lost.done():
                # asyncio.wait, not asyncio.timeout: a cancel (stop) must never be mistaken
                # for the ping interval ending.
                await asyncio.wait({protocol.lost}, timeout=PING_INTERVAL)
                if not protocol.lost.done():
                    transport.write(ping())
        finally:
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await conn.disconnect(nowait=True)
