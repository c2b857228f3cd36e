"""datadir.py: the generated secret key in the data directory, and its refusal where a
key must be configured."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from authgate import AuthConfig
from authgate.datadir import ensure_secret_key

SECRET = "a-secret-key-that-is-long-enough-0123456789"
#: AuthConfig() reads no setting the test did not make, in a fresh working directory.
pytestmark = pytest.mark.usefixtures("bare_environment")


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
