"""Every audit event there is (`events.EVENT_NAMES`): one place, so a name in a test, a
dashboard or the audit table always means one thing."""

from __future__ import annotations

__all__ = ["EVENT_NAMES"]

#: Every event there is; `emit` refuses any other name (a typo would be a silent hole in the
#: audit trail).
EVENT_NAMES = frozenset(
    {
        "registered",
        "login_succeeded",
        "login_failed",
        "refreshed",
        "refresh_replayed",
        "refresh_reused",
        "refresh_failed",
        "logged_out",
        "password_reset_requested",
        "password_reset_completed",
        "verification_requested",
        "verification_completed",
        "deactivated",
        "activated",
        "session_revoked",
        "password_changed",
        "email_change_requested",
        "email_change_completed",
        "account_deleted",
        # Second factors (contract §9, §10); `factor` says which: totp, recovery_code, passkey.
        "factor_enrolled",
        "factor_removed",
        "mfa_verified",
        "mfa_failed",
        "recovery_code_used",
        "recovery_codes_regenerated",
        "passkey_registered",
        "passkey_used",
        "passkey_renamed",
        # The admin API (contract §10); `actor` names who acted.
        "admin_user_created",
        "admin_user_updated",
        "admin_user_deleted",
        "admin_sessions_revoked",
    }
)
