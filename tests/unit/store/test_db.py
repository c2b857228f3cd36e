"""store/db.py's mapping of DATABASE_URL to the async drivers."""

from __future__ import annotations

from pathlib import Path

import pytest

from authgate import AuthConfig
from authgate.store.db import database_url

#: AuthConfig() reads no setting the test did not make, in a fresh working directory.
pytestmark = pytest.mark.usefixtures("bare_environment")


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
