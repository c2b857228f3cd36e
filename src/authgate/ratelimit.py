"""Rate limits (the `limits` library), stored in the cache so every worker counts together.

Policies, all keyed so that the limit itself reveals nothing:
- login: attempts per client IP; failures per canonical email, whether or not an account
  exists (a success clears them), locking that email's logins once the budget is spent;
- register, password-reset and email-verification requests per client IP;
- password-reset requests per account: over the limit the answer is the same 200 and no mail
  goes out, so the limit is no oracle.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass

from limits import RateLimitItem, parse
from limits.aio.strategies import MovingWindowRateLimiter

from authgate.errors import RateLimited

__all__ = ["Limits", "RateLimiter"]


@dataclass(frozen=True)
class Limits:
    """One `limits` notation string per policy; the defaults live in `AuthConfig`."""

    login_per_ip: str
    login_failures_per_account: str
    register_per_ip: str
    reset_per_ip: str
    reset_per_account: str
    verify_per_ip: str


class RateLimiter:
    def __init__(self, limiter: MovingWindowRateLimiter | None, limits: Limits) -> None:
        """`limiter=None` disables every limit (AUTHGATE_RATE_LIMITS=off)."""
        self._limiter = limiter
        self._items: dict[str, RateLimitItem] = {
            name: parse(value) for name, value in vars(limits).items()
        }

    async def hit(self, policy: str, key: str) -> None:
        """Count one request; raise `RateLimited` once the policy's budget is spent."""
        if not await self.try_hit(policy, key):
            raise RateLimited(await self._retry_after(policy, key))

    async def try_hit(self, policy: str, key: str) -> bool:
        """Count one request; False (and nothing raised) when over the limit."""
        if self._limiter is None:
            return True
        return await self._limiter.hit(self._items[policy], policy, _key(key))

    async def check(self, policy: str, key: str) -> None:
        """Raise `RateLimited` when the budget is spent, without counting."""
        if self._limiter is None:
            return
        if not await self._limiter.test(self._items[policy], policy, _key(key)):
            raise RateLimited(await self._retry_after(policy, key))

    async def clear(self, policy: str, key: str) -> None:
        if self._limiter is not None:
            await self._limiter.clear(self._items[policy], policy, _key(key))

    async def _retry_after(self, policy: str, key: str) -> int:
        assert self._limiter is not None
        stats = await self._limiter.get_window_stats(self._items[policy], policy, _key(key))
        return max(1, math.ceil(stats.reset_time - time.time()))


def _key(key: str) -> str:
    # Emails and addresses become fixed-length opaque keys: nothing personal in Redis keys,
    # and no key can smuggle the storage's separators.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
