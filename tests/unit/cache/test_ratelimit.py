"""The typed list of rate-limit policies: each names a setting that exists and is checked."""

from __future__ import annotations

from authgate.cache.ratelimit import Policy, budgets_from
from authgate.config import AuthConfig


def test_every_policy_reads_a_validated_setting() -> None:
    validated = AuthConfig.__pydantic_decorators__.field_validators["_check_limit"].info.fields
    # The per-session refresh limit is validated the same way but enforced inside the
    # rotation statement (store/rotation.py), not by a counter policy.
    assert sorted(p.setting for p in Policy) == sorted(
        set(validated) - {"refresh_limit_per_session"}
    )
    assert "refresh_limit_per_session" in validated
    assert len({p.key for p in Policy}) == len(Policy)


def test_budgets_come_from_the_settings() -> None:
    config = AuthConfig(login_limit_per_ip="7/minute", reset_limit_per_account="2/hour")
    budgets = {p.key: value for p, value in budgets_from(config).items()}
    assert budgets["login_per_ip"] == "7/minute"
    assert budgets["reset_per_account"] == "2/hour"
    assert budgets["verify_per_ip"] == AuthConfig().verify_limit_per_ip


def test_per_ip_policies_are_the_address_keyed_ones() -> None:
    assert sorted(p.key for p in Policy if p.per_ip) == [
        "login_per_ip",
        "register_per_ip",
        "reset_per_ip",
        "verify_per_ip",
    ]
