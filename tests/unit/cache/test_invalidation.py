"""cache/invalidation.py: only a pong for a recent ping keeps a worker's copy live (F4)."""

from __future__ import annotations

import redis.asyncio as aioredis

from authgate.cache.invalidation import _Invalidations
from authgate.cache.local import LEASE
from authgate.cache.state import StateCache
from tests.helpers import REDIS_URL, MonotonicClock, principal


def _resp(*parts: str) -> bytes:
    """A RESP2 array of bulk strings, as Redis sends on a subscription."""
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        data = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


async def test_only_a_pong_for_a_recent_ping_keeps_the_copy_live() -> None:
    t = MonotonicClock()
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        cache = StateCache(client, prefix="liveness-test:", local_clock=t)
        local = cache.local
        protocol = _Invalidations(cache.subscriber.on_message, cache.subscriber.on_lost)
        local.reset(live=True)
        local.put(local.generation, "s" * 32, principal(), None)
        assert local.get("s" * 32, 7) is not None
        t.t += LEASE + 0.25
        # A lagging stream: bytes keep arriving, but they are old (a message, and the pong
        # for a ping sent a second ago).
        protocol.data_received(_resp("message", cache.channel, "u - 99"))
        protocol.data_received(_resp("pong", f"authgate-ping:{t.t - 1.0:.6f}"))
        assert not local.live
        assert local.get("s" * 32, 7) is None
        # A pong for a ping sent just now proves the subscription current again.
        protocol.data_received(_resp("pong", f"authgate-ping:{t.t - 0.1:.6f}"))
        assert local.live
        # Garbage or a future send time proves nothing.
        t.t += LEASE
        protocol.data_received(_resp("pong", "authgate-ping:not-a-number"))
        protocol.data_received(_resp("pong", f"authgate-ping:{t.t + 100:.6f}"))
        protocol.data_received(_resp("pong", ""))
        assert not local.live
    finally:
        await client.aclose()
    assert StateCache(client, prefix="x:").publisher.ack_timeout > LEASE  # the lease ends first
