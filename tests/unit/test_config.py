"""Configuration (contract §3): environment variables, the secret key, validation that never
quotes a secret, safe descriptions."""

from __future__ import annotations

from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from authgate import AuthConfig
from authgate.web.transport import trusted_networks
from tests.helpers import TEST_SECRET

SECRET = "a-secret-key-that-is-long-enough-0123456789"
#: AuthConfig() reads no setting the test did not make, in a fresh working directory.
pytestmark = pytest.mark.usefixtures("bare_environment")


def test_defaults_are_the_contracts() -> None:
    config = AuthConfig()
    assert config.database_url is None
    assert config.cache_url is None
    assert config.embedded is True
    assert config.data_dir == Path(".authgate")
    assert config.prefix == "/auth"
    assert config.secret_key is None
    assert config.access_ttl == 900
    assert config.refresh_ttl == 1_209_600
    assert config.session_max_age == 2_592_000
    assert config.reset_ttl == 3600
    assert config.verify_ttl == 86_400
    assert config.smtp_url is None
    assert config.mail_from == "authgate@localhost"
    assert config.public_url == "http://127.0.0.1:8000"
    assert config.cookie_secure is True
    assert config.cookie_samesite == "lax"
    assert config.cookie_domain is None
    assert config.rate_limits is True
    assert config.max_body_bytes == 16_384
    assert config.password_reset_send_fn is None
    assert config.email_verify_send_fn is None


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env = {
        "DATABASE_URL": "postgresql://u:pw@127.0.0.1:5432/app",
        "CACHE_URL": "redis://127.0.0.1:6379/3",
        "AUTHGATE_DATA_DIR": str(tmp_path / "dd"),
        "AUTHGATE_PREFIX": "/identity",
        "AUTHGATE_SECRET_KEY": SECRET,
        "AUTHGATE_ACCESS_TTL": "60",
        "AUTHGATE_REFRESH_TTL": "3600",
        "AUTHGATE_SESSION_MAX_AGE": "0",
        "AUTHGATE_RESET_TTL": "120",
        "AUTHGATE_VERIFY_TTL": "240",
        "AUTHGATE_SMTP_URL": "smtp://user:pass@127.0.0.1:2525",
        "AUTHGATE_MAIL_FROM": "noreply@example.com",
        "AUTHGATE_PUBLIC_URL": "https://id.example.com/",
        "AUTHGATE_COOKIE_SECURE": "false",
        "AUTHGATE_COOKIE_SAMESITE": "strict",
        "AUTHGATE_COOKIE_DOMAIN": "example.com",
        "AUTHGATE_RATE_LIMITS": "off",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = AuthConfig()
    assert config.database_url == env["DATABASE_URL"]
    assert config.cache_url == env["CACHE_URL"]
    assert config.embedded is False
    assert config.data_dir == tmp_path / "dd"
    assert config.prefix == "/identity"
    assert config.secret_key is not None
    assert config.secret_key.get_secret_value() == SECRET
    assert config.secret() == SECRET.encode()
    assert (config.access_ttl, config.refresh_ttl, config.session_max_age) == (60, 3600, 0)
    assert (config.reset_ttl, config.verify_ttl) == (120, 240)
    assert config.smtp_url is not None
    assert config.smtp_url.get_secret_value() == env["AUTHGATE_SMTP_URL"]
    assert config.mail_from == "noreply@example.com"
    assert config.public_url == "https://id.example.com"
    assert config.cookie_secure is False
    assert config.cookie_samesite == "strict"
    assert config.cookie_domain == "example.com"
    assert config.rate_limits is False


@pytest.mark.parametrize(
    ("value", "expected"),
    [("off", False), ("false", False), ("0", False), ("on", True), ("true", True), ("1", True)],
)
def test_rate_limits_switch(monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv("AUTHGATE_RATE_LIMITS", value)
    assert AuthConfig().rate_limits is expected


@pytest.mark.parametrize("value", ["lax", "strict", "none"])
def test_cookie_samesite_values(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("AUTHGATE_COOKIE_SAMESITE", value)
    assert AuthConfig().cookie_samesite == value


@pytest.mark.parametrize("value", ["sometimes", "", "Lax; Secure"])
def test_cookie_samesite_other_values_are_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("AUTHGATE_COOKIE_SAMESITE", value)
    with pytest.raises(ValidationError):
        AuthConfig()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("auth/", "/auth"),
        ("/auth", "/auth"),
        ("/auth/", "/auth"),
        ("auth", "/auth"),
        (" /api/auth/ ", "/api/auth"),
        ("/", ""),
        ("", ""),
    ],
)
def test_prefix_is_normalised(monkeypatch: pytest.MonkeyPatch, given: str, expected: str) -> None:
    assert AuthConfig(prefix=given).prefix == expected
    monkeypatch.setenv("AUTHGATE_PREFIX", given)
    assert AuthConfig().prefix == expected


def test_empty_urls_mean_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "")
    monkeypatch.setenv("CACHE_URL", "")
    config = AuthConfig()
    assert config.database_url is None
    assert config.cache_url is None


def test_keyword_arguments_use_the_field_names() -> None:
    config = AuthConfig(database_url="sqlite:///x.db", cache_url="redis://127.0.0.1/0")
    assert config.database_url == "sqlite:///x.db"
    assert config.cache_url == "redis://127.0.0.1/0"


@pytest.mark.parametrize("secret", ["short-secret-xyz", "x" * 31, "p@ssw0rd-hunter2"])
def test_short_secret_is_refused_without_quoting_it(
    monkeypatch: pytest.MonkeyPatch, secret: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        AuthConfig(secret_key=secret)
    message = str(caught.value)
    assert "at least 32" in message
    assert secret not in message
    monkeypatch.setenv("AUTHGATE_SECRET_KEY", secret)
    with pytest.raises(ValidationError) as caught:
        AuthConfig()
    assert secret not in str(caught.value)


def test_invalid_settings_never_quote_a_url_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:hunter2@127.0.0.1/db")
    monkeypatch.setenv("AUTHGATE_ACCESS_TTL", "not-a-number")
    with pytest.raises(ValidationError) as caught:
        AuthConfig()
    assert "hunter2" not in str(caught.value)
    assert "not-a-number" not in str(caught.value)


def test_secret_is_not_in_repr() -> None:
    config = AuthConfig(secret_key=SECRET, smtp_url="smtp://u:hunter2@127.0.0.1:25")
    assert SECRET not in repr(config)
    assert SECRET not in str(config)
    assert "hunter2" not in repr(config)


def test_secret_before_loading_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        AuthConfig().secret()


@pytest.mark.parametrize(
    ("database", "cache"),
    [
        ("postgresql://admin:hunter2@127.0.0.1:5432/app", "redis://:hunter2@127.0.0.1:6379/0"),
        ("postgresql://admin:hun@ter2@127.0.0.1/app", "redis://user:hunter2@127.0.0.1/0"),
        ("postgres://admin:hunter2@127.0.0.1/app?sslmode=require", "rediss://:hunter2@h:1/0"),
        ("postgresql://admin:hunter2@/app?host=/run/pg", "unix://:hunter2@/tmp/redis.sock"),
    ],
)
def test_describe_never_includes_a_url_password(database: str, cache: str) -> None:
    config = AuthConfig(
        database_url=database,
        cache_url=cache,
        secret_key=SECRET,
        smtp_url="smtp://mailer:hunter2@127.0.0.1:25",
    )
    described = config.describe()
    text = repr(described)
    assert "hunter2" not in text
    assert "ter2" not in text
    assert SECRET not in text
    assert described["smtp"] == "configured"
    assert described["prefix"] == "/auth"


def test_describe_the_embedded_setup() -> None:
    described = AuthConfig().describe()
    assert described["database"] == "embedded sqlite"
    assert described["cache"] == "in-process memory"
    assert described["smtp"] == "not configured"


@pytest.mark.parametrize(
    "key",
    [
        "a" * 64,  # long, one character
        "changeme-changeme-changeme-changeme",  # long, eight different characters
    ],
)
def test_long_but_guessable_secret_keys_are_refused_without_quoting_them(key: str) -> None:
    with pytest.raises(ValidationError) as info:
        AuthConfig(secret_key=key)
    assert key not in str(info.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("login_limit_per_ip", "lots"),
        ("cors_origins", "*"),
        ("cors_origins", "example.com"),
        ("trusted_proxies", "10.0.0.0/33"),
    ],
)
def test_bad_settings_are_refused(field: str, value: str) -> None:
    settings: dict[str, Any] = {field: value}  # as the environment gives them: any field, a str
    with pytest.raises(ValidationError):
        AuthConfig(**settings)


def test_previous_keys_must_be_long_enough() -> None:
    with pytest.raises(ValidationError) as info:
        AuthConfig(secret_key=SECRET, secret_key_previous="short")
    assert "short" not in str(info.value)


def test_mapped_trusted_proxy_entries_are_ipv4() -> None:
    config = AuthConfig(trusted_proxies="::ffff:10.0.0.0/104, 10.1.2.3, ::1")
    assert trusted_networks(config) == (
        ip_network("10.0.0.0/8"),
        ip_network("10.1.2.3/32"),
        ip_network("::1/128"),
    )


@pytest.mark.parametrize(
    ("env", "database_url", "enabled"),
    [
        (None, None, True),
        (None, "postgresql://db/app", False),
        ("on", "postgresql://db/app", True),
        ("off", None, False),
        ("true", None, True),
    ],
)
def test_docs_setting(
    monkeypatch: pytest.MonkeyPatch, env: str | None, database_url: str | None, enabled: bool
) -> None:
    for name in ("AUTHGATE_DOCS", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    if env is not None:
        monkeypatch.setenv("AUTHGATE_DOCS", env)
    if database_url is not None:
        monkeypatch.setenv("DATABASE_URL", database_url)
    assert AuthConfig(secret_key=TEST_SECRET).docs_enabled is enabled
