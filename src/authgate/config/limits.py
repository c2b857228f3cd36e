"""Rate-limit settings (`AUTHGATE_*_LIMIT*`), a part of `AuthConfig`.

Budgets are in the `limits` notation ("N/period", e.g. "30/minute", "10/15minutes"); each is a
policy of `cache/ratelimit.py`. `AUTHGATE_RATE_LIMITS=off` turns every one of them off.
"""

from __future__ import annotations

from pydantic import field_validator
from pydantic_settings import BaseSettings

__all__ = ["RateLimitSettings"]


class RateLimitSettings(BaseSettings):
    rate_limits: bool = True
    # Rate limits in the `limits` notation ("N/period", e.g. "30/minute", "10/15minutes").
    login_limit_per_ip: str = "30/minute"
    #: Failed logins per email from all client addresses (whether or not an account exists);
    #: over it, that email's logins answer 429 until the window ends, a success or a reset.
    login_failure_limit: str = "50/hour"
    #: Failed logins per (email, client address); each time an address spends it, its next
    #: window is twice as long (1, 2, 4 … minutes, at most a day).
    login_failure_limit_per_address: str = "5/minute"
    register_limit_per_ip: str = "20/hour"
    reset_limit_per_ip: str = "20/hour"
    reset_limit_per_account: str = "5/hour"
    verify_limit_per_ip: str = "20/hour"
    #: Email-change requests per account (each mails a link to an address the user typed).
    email_change_limit_per_account: str = "5/hour"
    #: Rotations per session (a small burst in a fixed window): one client refreshing in a
    #: loop cannot grow the refresh-token table without bound. Over it, refresh answers 429
    #: and the presented token stays valid.
    refresh_limit_per_session: str = "10/minute"

    #: Wrong second-factor codes (TOTP or recovery) per account; over it the second step
    #: answers 429 until the window ends (contract §9: 5 in 15 minutes).
    mfa_failure_limit: str = "5/15minutes"

    @field_validator(
        "login_limit_per_ip",
        "login_failure_limit",
        "login_failure_limit_per_address",
        "register_limit_per_ip",
        "reset_limit_per_ip",
        "reset_limit_per_account",
        "verify_limit_per_ip",
        "email_change_limit_per_account",
        "refresh_limit_per_session",
        "mfa_failure_limit",
    )
    @classmethod
    def _check_limit(cls, value: str) -> str:
        from limits import parse

        try:
            parse(value)
        except ValueError:
            raise ValueError(f"not a rate limit like '30/minute': {value!r}") from None
        return value

    def refresh_budget(self) -> tuple[int, int]:
        """(burst, window seconds) of the per-session refresh limit; unlimited when rate
        limits are off."""
        from limits import parse

        item = parse(self.refresh_limit_per_session)
        if not self.rate_limits:
            return 2**31 - 1, item.get_expiry()
        return item.amount, item.get_expiry()
