"""The generated secret key (issue 12, item 8): an explicit SQLite file is one host, like the
embedded default, so its key is generated and kept in the data dir; a database server still
needs AUTHGATE_SECRET_KEY."""

from __future__ import annotations

import logging
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from authgate.config import AuthConfig, ConfigError
from authgate.datadir import ensure_secret_key, one_host


@pytest.mark.parametrize(
    "scheme", ["sqlite", "sqlite+aiosqlite", "SQLite", "sqlite+pysqlite"], ids=str
)
def test_an_explicit_sqlite_file_gets_a_generated_key(
    tmp_path: Path, scheme: str, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "data"
    url = f"{scheme}:///{tmp_path / 'app.db'}"
    caplog.set_level(logging.WARNING, logger="authgate")
    config = AuthConfig(database_url=url, data_dir=data_dir)
    assert one_host(config)

    loaded = ensure_secret_key(config)
    assert loaded.secret_key is not None
    key = loaded.secret_key.get_secret_value()
    assert len(key) >= 32
    key_file = data_dir / "secret_key"
    assert key_file.read_text().strip() == key
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(data_dir).st_mode) == 0o700
    assert loaded.database_url == url
    (warning,) = [r for r in caplog.records if "generated a new secret key" in r.getMessage()]
    assert key not in warning.getMessage()

    # Kept: the next start (another worker, a restart) reads the same key back.
    caplog.clear()
    again = ensure_secret_key(AuthConfig(database_url=url, data_dir=data_dir))
    assert again.secret() == key.encode()
    assert not [r for r in caplog.records if "generated" in r.getMessage()]


def test_workers_starting_at_once_share_one_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    config = AuthConfig(database_url=url, data_dir=tmp_path / "data")
    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = set(pool.map(lambda _: ensure_secret_key(config).secret(), range(16)))
    assert len(keys) == 1


def test_an_explicit_key_is_kept_with_a_sqlite_file(tmp_path: Path) -> None:
    key = "explicit-key-for-this-test-0123456789-abcdef"
    config = AuthConfig(
        database_url=f"sqlite:///{tmp_path / 'app.db'}", data_dir=tmp_path / "d", secret_key=key
    )
    assert ensure_secret_key(config) is config
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres@127.0.0.1:5432/app",
        "postgresql+asyncpg://postgres@127.0.0.1/app",
        "postgres://u:hunter2@db/app",
        "mysql://u@db/app",
        "sqlitex://not/sqlite",
    ],
)
def test_a_database_server_still_needs_a_configured_key(tmp_path: Path, url: str) -> None:
    config = AuthConfig(database_url=url, data_dir=tmp_path / "data")
    assert not one_host(config)
    with pytest.raises(ConfigError, match="AUTHGATE_SECRET_KEY must be set") as raised:
        ensure_secret_key(config)
    assert "hunter2" not in str(raised.value)
    assert not (tmp_path / "data").exists()


def test_the_embedded_default_is_one_host(tmp_path: Path) -> None:
    assert one_host(AuthConfig(data_dir=tmp_path))
