"""Rate limits: fixed-window counters in a store every worker shares (`store/limits.py`: the
database without a cache, Redis with `CACHE_URL`), so `serve --workers N` and several hosts
count together instead of each worker granting the whole budget.

The policies are the members of `Policy`, all keyed by keyed digests (HMAC under a key
derived from the secret key), so that neither the store nor a backup of it names an email or
an address:

- `LOGIN_PER_IP`: login attempts per client address;
- failed logins, progressive rather than a hard lock (see `login_attempt`):
  `LOGIN_FAILURES_PER_ADDRESS`, per (email, client address), a small budget whose window
  doubles each time it is spent, and `LOGIN_FAILURES_PER_ACCOUNT`, per email across all
  addresses, a larger budget that stops distributed guessing. Both count whether or not an
  account exists; a success clears them; a password reset (or any change of the account's
  credentials) starts them afresh. The slot is reserved atomically before the password is
  verified and given back when the request is not an attempt, so a concurrent burst tests
  exactly the budget;
- `REGISTER_PER_IP`, `RESET_PER_IP`, `VERIFY_PER_IP`: those requests per client address;
- `RESET_PER_ACCOUNT`: password-reset requests per account: over the limit the answer is the
  same 200 and no mail goes out, so the limit is no oracle;
- `MFA_FAILURES_PER_ACCOUNT`: wrong second-factor codes per account (`reserve`): over it the
  account's second step answers 429 until the window ends.

`limits.parse` only reads the "N/period" notation of the settings.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from limits import parse

from authgate.cache.counters import CounterStore
from authgate.config import AuthConfig
from authgate.errors import RateLimited

__all__ = ["LoginAttempt", "Policy", "RateLimiter", "budgets_from"]

logger = logging.getLogger("authgate")

#: The longest an address's failure window grows by doubling, and how long the doubling is
#: remembered after the address first spent its budget.
MAX_FAILURE_WINDOW = 86_400.0
LEVEL_WINDOW = 86_400.0
_MAX_LEVEL = 64


class Policy(Enum):
    """The rate limits, one member each. `key` prefixes its counters' keys in the store (so it
    never changes once deployed); `setting` is the `AuthConfig` field holding its "N/period"
    budget; a `per_ip` policy counts client addresses (an IPv6 address as its network)."""

    LOGIN_PER_IP = ("login_per_ip", "login_limit_per_ip", True)
    LOGIN_FAILURES_PER_ACCOUNT = ("login_failures_per_account", "login_failure_limit", False)
    LOGIN_FAILURES_PER_ADDRESS = (
        "login_failures_per_address",
        "login_failure_limit_per_address",
        False,
    )
    REGISTER_PER_IP = ("register_per_ip", "register_limit_per_ip", True)
    RESET_PER_IP = ("reset_per_ip", "reset_limit_per_ip", True)
    RESET_PER_ACCOUNT = ("reset_per_account", "reset_limit_per_account", False)
    VERIFY_PER_IP = ("verify_per_ip", "verify_limit_per_ip", True)
    EMAIL_CHANGE_PER_ACCOUNT = ("email_change_per_account", "email_change_limit_per_account", False)
    MFA_FAILURES_PER_ACCOUNT = ("mfa_failures_per_account", "mfa_failure_limit", False)

    def __init__(self, key: str, setting: str, per_ip: bool) -> None:
        self.key = key
        self.setting = setting
        self.per_ip = per_ip


#: Not a policy of its own: how often an address spent its failure budget (its doubling).
_FAILURE_LEVEL = "login_failure_level"


def budgets_from(config: AuthConfig) -> dict[Policy, str]:
    """Each policy's "N/period" string, read from its setting."""
    return {policy: getattr(config, policy.setting) for policy in Policy}


def _ignore(policy: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class _Budget:
    amount: int
    window: float  # seconds


class RateLimiter:
    def __init__(
        self,
        store: CounterStore | None,
        budgets: Mapping[Policy, str],
        *,
        secret: bytes,
        clock: Callable[[], datetime],
        address_key: Callable[[str], str] = str,
    ) -> None:
        """`store=None` disables every limit (AUTHGATE_RATE_LIMITS=off). `address_key` maps a
        client address to what per-address limits count it as (an IPv6 /64 network)."""
        self._store = store
        self._clock = clock
        self._address_key = address_key
        # Keyed by `key`: a str caches its hash, an Enum member computes its own in Python.
        self._budgets: dict[str, _Budget] = {}
        for policy, value in budgets.items():
            item = parse(value)
            self._budgets[policy.key] = _Budget(item.amount, float(item.get_expiry()))
        self._key_secret = hmac.new(secret, b"authgate rate-limit keys", hashlib.sha256).digest()
        #: Told the policy's `key` of every request over a limit (the metrics); nothing else.
        self.on_limited: Callable[[str], None] = _ignore

    async def hit(self, policy: Policy, key: str) -> None:
        """Count one request; raise `RateLimited` once the policy's budget is spent."""
        if self._store is None:
            return
        budget, now = self._budgets[policy.key], self._clock()
        if policy.per_ip:
            key = self._address_key(key)
        got = await self._store.hit(
            self._key(policy.key, key), limit=budget.amount, window=budget.window, now=now
        )
        if not got.allowed:
            self.on_limited(policy.key)
            raise RateLimited(got.retry_after(now))

    async def try_hit(self, policy: Policy, key: str) -> bool:
        """Count one request; False (and nothing raised) when over the limit."""
        try:
            await self.hit(policy, key)
        except RateLimited:
            return False
        return True

    async def login_attempt(self, account: str, version: int, address: str) -> LoginAttempt:
        """Reserve one failed-login slot for `account` (the canonical email) from `address`,
        before the password is verified; raise `RateLimited` when none is left.

        `version` is the account's credentials version (0 without an account): a reset or
        password change bumps it, so the account's counters start afresh, from every address.

        Per (account, address): `LOGIN_FAILURES_PER_ADDRESS` failures per window; each time an
        address spends that budget its next window is twice as long (1, 2, 4 … minutes with
        the default, at most a day; forgotten a day after the address first spent it). Per
        account, from all addresses: `LOGIN_FAILURES_PER_ACCOUNT`. The caller keeps the slot
        for a failure, and calls `succeeded()` or `give_back()` otherwise.
        """
        store = self._store
        if store is None:
            return LoginAttempt(None, [], ())
        now = self._clock()
        per_address = self._budgets[Policy.LOGIN_FAILURES_PER_ADDRESS.key]
        per_account = self._budgets[Policy.LOGIN_FAILURES_PER_ACCOUNT.key]
        address = self._address_key(address)
        pair = self._key(Policy.LOGIN_FAILURES_PER_ADDRESS.key, account, address, str(version))
        level_key = self._key(_FAILURE_LEVEL, account, address)
        account_key = self._key(Policy.LOGIN_FAILURES_PER_ACCOUNT.key, account, str(version))
        attempt = LoginAttempt(store, [], (pair, level_key, account_key))

        level = min(await store.count(level_key, now), _MAX_LEVEL)
        window = min(per_address.window * 2**level, max(per_address.window, MAX_FAILURE_WINDOW))
        got = await store.hit(pair, limit=per_address.amount, window=window, now=now)
        if not got.allowed:
            self.on_limited(Policy.LOGIN_FAILURES_PER_ADDRESS.key)
            raise RateLimited(got.retry_after(now))
        attempt.taken.append((pair, got.window_end))
        try:
            overall = await store.hit(
                account_key, limit=per_account.amount, window=per_account.window, now=now
            )
            if not overall.allowed:
                self.on_limited(Policy.LOGIN_FAILURES_PER_ACCOUNT.key)
                raise RateLimited(overall.retry_after(now))
            attempt.taken.append((account_key, overall.window_end))
            if got.hits == per_address.amount:
                # This attempt spends the address's budget: its next window doubles.
                raised = await store.hit(level_key, limit=_MAX_LEVEL, window=LEVEL_WINDOW, now=now)
                if raised.allowed:
                    attempt.taken.append((level_key, raised.window_end))
        except BaseException:
            await attempt.give_back()
            raise
        return attempt

    async def reserve(self, policy: Policy, key: str) -> LoginAttempt:
        """Reserve one failure slot of `policy` for `key` before an attempt is checked; raise
        `RateLimited` when none is left. Keep it for a failure (do nothing), `give_back()` it
        when the attempt succeeded or was no attempt: a concurrent burst tests exactly the
        budget, and successes never use it up."""
        store = self._store
        if store is None:
            return LoginAttempt(None, [], ())
        budget, now = self._budgets[policy.key], self._clock()
        counter = self._key(policy.key, key)
        got = await store.hit(counter, limit=budget.amount, window=budget.window, now=now)
        if not got.allowed:
            self.on_limited(policy.key)
            raise RateLimited(got.retry_after(now))
        return LoginAttempt(store, [(counter, got.window_end)], (counter,))

    def _key(self, name: str, *parts: str) -> str:
        # A fixed-length keyed digest: nothing personal in the store, nothing a guessed email
        # can be checked against without the secret, and no separator can be smuggled in.
        message = "\x00".join(parts).encode("utf-8", "surrogatepass")
        return name + ":" + hmac.new(self._key_secret, message, hashlib.sha256).hexdigest()[:32]


#: Give-backs running in their own tasks (a cancelled request still returns its slot).
_returning: set[asyncio.Task[None]] = set()


class LoginAttempt:
    """A reserved failed-login slot. Keep it for a failure (do nothing); `succeeded()` after
    the right password; `give_back()` when the request was no attempt (busy, cancelled, the
    database away)."""

    def __init__(
        self, store: CounterStore | None, taken: list[tuple[str, datetime]], keys: tuple[str, ...]
    ) -> None:
        self._store = store
        self.taken = taken
        self._keys = keys

    async def succeeded(self) -> None:
        """The right password: the address's and the account's failures are cleared."""
        self.taken = []
        if self._store is not None:
            await self._store.clear(*self._keys)

    async def give_back(self) -> None:
        """Return the reserved slots. Runs in a task of its own, shielded: called while the
        request is being cancelled, it still completes."""
        if self._store is None or not self.taken:
            return
        taken, self.taken = self.taken, []
        task = asyncio.ensure_future(_give_back(self._store, taken))
        _returning.add(task)
        task.add_done_callback(_returning.discard)
        await asyncio.shield(task)


async def _give_back(store: CounterStore, taken: list[tuple[str, datetime]]) -> None:
    for key, window_end in taken:
        try:
            await store.give_back(key, window_end)
        except Exception as exc:  # the slot stays spent: failing closed
            logger.warning("a reserved login slot was not given back: %s", type(exc).__name__)
