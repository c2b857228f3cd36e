"""The data directory: files authgate keeps on the host (the generated secret key, generated
signing keys, the embedded database), each created private (0600 in a 0700 directory) and, where
several workers start at once, by exactly one of them.

It sits beside `config.py` rather than in one layer because `tokens/` (keys) and `store/` (the
SQLite file) both keep files there.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import SecretStr

from authgate.config import MIN_SECRET_KEY_LENGTH, AuthConfig, ConfigError

__all__ = ["ensure_private_dir", "ensure_secret_key", "one_host", "write_once"]

logger = logging.getLogger("authgate")

SECRET_KEY_FILE = "secret_key"  # a file name  # noqa: S105  # nosec B105


def ensure_secret_key(config: AuthConfig) -> AuthConfig:
    """Return `config` with a secret key, generating one in the data dir when none is set.

    The key file is created with O_EXCL and mode 0600, so when several workers start at once
    exactly one writes it and the others read that one. A key that is set explicitly is used
    as it is and nothing is written. Only a database server is refused (`one_host`).
    """
    if config.secret_key is not None:
        return config
    if not one_host(config):
        # Several workers and hosts share one database; a key generated on each would make
        # every host refuse the others' tokens.
        raise ConfigError(
            "AUTHGATE_SECRET_KEY must be set when DATABASE_URL names a database server (every "
            "worker and host needs the same key); generate one with: "
            "python -c 'import secrets; print(secrets.token_urlsafe(48))'"
        )
    path = config.data_dir / SECRET_KEY_FILE
    data, created = write_once(
        path,
        secrets.token_urlsafe(48).encode(),
        complete=lambda d: len(d.strip()) >= MIN_SECRET_KEY_LENGTH,
    )
    key = data.decode().strip()
    if created:
        logger.warning(
            "generated a new secret key in %s (development setup); "
            "set AUTHGATE_SECRET_KEY in production",
            path,
        )
    return config.model_copy(update={"secret_key": SecretStr(key)})


def one_host(config: AuthConfig) -> bool:
    """True when every process that can use the database runs on this host: the embedded
    default or an explicit SQLite file (`sqlite:///…`, any driver). Then keys may be generated
    and kept in the data dir; with a database server (PostgreSQL) they must be configured."""
    if config.database_url is None:
        return True
    scheme = config.database_url.partition(":")[0]
    return scheme.partition("+")[0].strip().lower() == "sqlite"


def write_once(path: Path, data: bytes, *, complete: Callable[[bytes], bool]) -> tuple[bytes, bool]:
    """Create `path` holding `data` (mode 0600) unless it exists; (contents, created).

    O_EXCL makes exactly one of several workers starting at once the writer; the others wait
    (bounded) until its file is `complete` and use that, so they all share one key.
    """
    ensure_private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(50):
            existing = path.read_bytes()
            if complete(existing):
                return existing, False
            time.sleep(0.02)
        raise ConfigError(f"{path} is incomplete; delete it to generate a new one") from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return data, True


def ensure_private_dir(path: Path) -> None:
    """Create the data directory with mode 0700, or take an existing one down to 0700.

    It holds the embedded database and the generated keys: no other local user may list or
    open them. A directory that was wider is fixed with a warning (authgate may be the only
    program that uses it; anything else should not be in it).
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        os.chmod(path, 0o700)
        logger.warning("data directory %s was mode %04o; now 0700", path, mode)
