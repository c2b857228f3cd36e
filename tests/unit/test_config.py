"""Configuration (contract §3): environment variables, the secret key, safe descriptions,
and the database URL mapping."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from authgate import AuthConfig
from authgate.datadir import ensure_secret_key
from authgate.store.db import database_url

SECRET = "a-secret-key-that-is-long-enough-0123456789"
ENV_VARS = (
    "DATABASE_URL",
    "CACHE_URL",
    "AUTHGATE_DATA_DIR",
    "AUTHGATE_PREFIX",
    "AUTHGATE_SECRET_KEY",
    "AUTHGATE_ACCESS_TTL",
    "AUTHGATE_REFRESH_TTL",
    "AUTHGATE_SESSION_MAX_AGE",
    "AUTHGATE_RESET_TTL",
    "AUTHGATE_VERIFY_TTL",
    "AUTHGATE_SMTP_URL",
    "AUTHGATE_MAIL_FROM",
    "AUTHGATE_PUBLIC_URL",
    "AUTHGATE_COOKIE_SECURE",
    "AUTHGATE_COOKIE_SAMESITE",
    "AUTHGATE_COOKIE_DOMAIN",
    "AUTHGATE_RATE_LIMITS",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


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


def test_ensure_secret_key_creates_a_0600_key_file_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = AuthConfig(data_dir=data_dir)
    first = ensure_secret_key(config)
    key_file = data_dir / "secret_key"
    assert key_file.is_file()
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert first.secret_key is not None
    key = first.secret_key.get_secret_value()
    assert len(key) >= 32
    assert key_file.read_text().strip() == key
    mtime = key_file.stat().st_mtime_ns
    # The original config is unchanged; a second call reads the same key back.
    assert config.secret_key is None
    second = ensure_secret_key(AuthConfig(data_dir=data_dir))
    assert second.secret_key is not None
    assert second.secret_key.get_secret_value() == key
    assert key_file.stat().st_mtime_ns == mtime
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600


def test_ensure_secret_key_keeps_an_explicit_key(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = AuthConfig(data_dir=data_dir, secret_key=SECRET)
    assert ensure_secret_key(config) is config
    assert not (data_dir / "secret_key").exists()


def test_separate_data_dirs_get_separate_keys(tmp_path: Path) -> None:
    a = ensure_secret_key(AuthConfig(data_dir=tmp_path / "a")).secret()
    b = ensure_secret_key(AuthConfig(data_dir=tmp_path / "b")).secret()
    assert a != b


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


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # Userinfo, with and without a user name, with `@ / ? # :` left unescaped in it.
        ("postgresql://admin:hunter2@db:5432/app", "postgresql://***@db:5432/app"),
        ("postgresql://admin:hun@ter2@db/app", "postgresql://***@db/app"),
        ("redis://:hunter2@cache:6379/0", "redis://***@cache:6379/0"),
        (
            "rediss://default:hunter2@cache.example.com:6380/1",
            "rediss://***@cache.example.com:6380/1",
        ),
        ("postgresql://admin:hunt/er2@db/app", "postgresql://***@db/app"),
        ("postgresql://admin:hunt#er2@db/app", "postgresql://***"),
        ("unix://:hunter2@/run/redis.sock?db=0", "unix://***@/run/redis.sock?db=***"),
        # Query parameters: every value, whatever its name.
        ("postgresql://db/app?password=hunter2", "postgresql://db/app?password=***"),
        (
            "postgresql://admin@db/app?sslmode=verify-full&sslpassword=hunter2",
            "postgresql://***@db/app?sslmode=***&sslpassword=***",
        ),
        ("postgres://admin:hunter2@db/app?sslmode=require", "postgres://***@db/app?sslmode=***"),
        ("redis://cache:6379/0?password=hunter2", "redis://cache:6379/0?password=***"),
        (
            "redis://cache/0?username=u&password=hunter2",
            "redis://cache/0?username=***&password=***",
        ),
        ("postgresql://admin:hunter2@/app?host=/run/pg", "postgresql://***@/app?host=***"),
        ("postgresql://db/app?hunter2", "postgresql://db/app?***"),
        ("postgresql://db/app;password=x?user=a@b&password=hunter2", "postgresql://***"),
        (
            "postgresql://db/app?user=a@b&password=hunter2",
            "postgresql://db/app?user=***&password=***",
        ),
        # Where the userinfo ends is undecidable: only the scheme is shown.
        ("postgresql://u:p@db/app?password=hunter2@x", "postgresql://***"),
        ("redis://:hun?ter2@cache:6379/0", "redis://***"),
        ("postgresql://u:p#w@h1:5432,h2:5432/app?sslpassword=hunter2", "postgresql://***"),
        ("postgresql://db/app#hunter2", "postgresql://db/app"),
        ("sqlite:////var/lib/app.db", "sqlite:////var/lib/app.db"),
        ("no scheme hunter2", "<unparseable url>"),
    ],
)
def test_redact_url_hides_every_credential(url: str, shown: str) -> None:
    from authgate.events import redact_url as _redact_url

    assert _redact_url(url) == shown
    assert "hunter2" not in shown
    assert "ter2" not in shown


def test_describe_the_embedded_setup() -> None:
    described = AuthConfig().describe()
    assert described["database"] == "embedded sqlite"
    assert described["cache"] == "in-process memory"
    assert described["smtp"] == "not configured"


@pytest.mark.parametrize(
    ("given", "driver"),
    [
        ("postgresql://u:p@127.0.0.1:5432/app", "postgresql+asyncpg"),
        ("postgres://u:p@127.0.0.1:5432/app", "postgresql+asyncpg"),
        ("postgresql+asyncpg://u:p@127.0.0.1/app", "postgresql+asyncpg"),
        ("postgresql+psycopg2://u:p@127.0.0.1/app", "postgresql+asyncpg"),
        ("sqlite:///relative.db", "sqlite+aiosqlite"),
        ("sqlite:////var/lib/authgate/absolute.db", "sqlite+aiosqlite"),
    ],
)
def test_database_url_maps_to_async_drivers(given: str, driver: str) -> None:
    url = database_url(AuthConfig(database_url=given))
    assert url.drivername == driver


def test_postgres_url_keeps_its_parts() -> None:
    url = database_url(AuthConfig(database_url="postgres://u:p@127.0.0.1:5433/app?sslmode=require"))
    assert (url.username, url.password, url.host, url.port, url.database) == (
        "u",
        "p",
        "127.0.0.1",
        5433,
        "app",
    )
    assert url.query.get("ssl") == "require"
    assert "sslmode" not in url.query


def test_sqlite_url_keeps_its_path() -> None:
    url = database_url(AuthConfig(database_url="sqlite:////var/lib/authgate/absolute.db"))
    assert url.database == "/var/lib/authgate/absolute.db"


def test_no_database_url_is_the_embedded_sqlite_file(tmp_path: Path) -> None:
    config = AuthConfig(data_dir=tmp_path / "dd")
    url = database_url(config)
    assert url.drivername == "sqlite+aiosqlite"
    assert url.database == str((tmp_path / "dd" / "authgate.sqlite3").resolve())
    assert (tmp_path / "dd").is_dir()


@pytest.mark.parametrize(
    "given",
    ["mysql://u:p@127.0.0.1/app", "mysql+aiomysql://u:p@127.0.0.1/app", "oracle://u:p@h/x"],
)
def test_other_databases_are_refused(given: str) -> None:
    with pytest.raises(ValueError, match="unsupported DATABASE_URL") as caught:
        database_url(AuthConfig(database_url=given))
    assert ":p@" not in str(caught.value)
