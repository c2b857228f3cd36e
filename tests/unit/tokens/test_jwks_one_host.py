"""An explicit SQLite DATABASE_URL is one host, like the embedded default: an EdDSA or ES256
signing key is generated and kept in the data dir (a database server still needs the file:
test_jwks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from authgate.config import AuthConfig
from authgate.tokens.jwks import load_signing_keys
from tests.helpers import TEST_SECRET


@pytest.mark.parametrize("algorithm", ["EdDSA", "ES256"])
def test_an_explicit_sqlite_file_generates_and_keeps_the_key(
    tmp_path: Path, algorithm: str
) -> None:
    config = AuthConfig(
        database_url=f"sqlite:///{tmp_path / 'auth.db'}",
        data_dir=tmp_path / "data",
        secret_key=TEST_SECRET,
        jwt_algorithm=algorithm,
    )
    first = load_signing_keys(config)
    second = load_signing_keys(config)
    assert first is not None
    assert second is not None
    assert first.kid == second.kid
