"""The database: engine from a URL, short transactions, migrations under a lock.

Transactions are short and explicit (`async with db.write() as s:`) rather than one per
request, because login and password changes spend ~50 ms hashing and no database lock may
be held over that. Stores only flush; the `write()`/`read()` block commits or rolls back.

SQLite (the embedded default) allows one writer. Writes take `BEGIN IMMEDIATE`, so a
transaction never has to upgrade a read lock (which fails at once with "database is
locked" instead of waiting), and inside one process they queue on an asyncio lock rather
than on SQLite's busy handler; across processes the busy timeout does the queueing.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import column, event, select, table, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from authgate.config import AuthConfig
from authgate.datadir import ensure_private_dir

__all__ = ["Database", "database_url", "schema_at_head", "upgrade_schema"]

logger = logging.getLogger("authgate")
# aiosqlite logs every call with its SQL parameters at DEBUG (password hashes, token digests),
# past SQLAlchemy's hide_parameters: keep it quiet even when the root logger is at DEBUG.
logging.getLogger("aiosqlite").setLevel(logging.INFO)

SQLITE_BUSY_TIMEOUT_S = 30.0
#: Behind PgBouncer in transaction pooling mode, a server connection is ours only for one
#: transaction, so no prepared statement may be kept or named: asyncpg's statement cache
#: and SQLAlchemy's are off, and SQLAlchemy's statements are prepared as the unnamed
#: statement, which the next Parse replaces (nothing piles up on PgBouncer's servers, and
#: no name can collide with another client's).
_PGBOUNCER_CONNECT_ARGS: dict[str, Any] = {
    "statement_cache_size": 0,
    "prepared_statement_cache_size": 0,
    "prepared_statement_name_func": lambda: "",
}
# Arbitrary but fixed: the key of the PostgreSQL advisory lock held while migrating.
MIGRATION_LOCK_KEY = 0x61757468_67617465 & 0x7FFFFFFFFFFFFFFF


def database_url(config: AuthConfig) -> URL:
    """The SQLAlchemy URL for the configured database, with its async driver."""
    if config.database_url is None:
        ensure_private_dir(config.data_dir)
        return URL.create("sqlite+aiosqlite", database=str(config.sqlite_path.resolve()))
    raw = config.database_url
    if raw.startswith("postgres://"):  # Heroku-style spelling
        raw = "postgresql://" + raw[len("postgres://") :]
    url = make_url(raw)
    backend = url.get_backend_name()
    if backend == "postgresql":
        query = dict(url.query)
        # asyncpg spells libpq's sslmode as ssl.
        if "sslmode" in query:
            query["ssl"] = query.pop("sslmode")
        return url.set(drivername="postgresql+asyncpg", query=query)
    if backend == "sqlite":
        return url.set(drivername="sqlite+aiosqlite")
    raise ValueError(f"unsupported DATABASE_URL scheme {backend!r}: use postgresql:// or sqlite://")


class Database:
    def __init__(self, config: AuthConfig) -> None:
        self.url = database_url(config)
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        engine_args: dict[str, Any] = {
            # Parameters may be password hashes or token digests: keep them out of errors.
            "hide_parameters": True,
            "pool_pre_ping": False,
        }
        if self.is_sqlite:
            engine_args["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S}
            if self.url.database and self.url.database != ":memory:":
                private_sqlite_files(Path(self.url.database))
        else:
            connect_args: dict[str, Any] = {
                "timeout": config.db_timeout,
                # No statement of ours runs long; a stuck server must not hang requests.
                "command_timeout": config.db_timeout,
                "server_settings": {"application_name": "authgate"},
            }
            if config.db_pgbouncer:
                connect_args.update(_PGBOUNCER_CONNECT_ARGS)
            engine_args.update(
                pool_size=config.db_pool_size,
                max_overflow=config.db_max_overflow,
                pool_timeout=config.db_timeout,
                pool_recycle=1800,
                connect_args=connect_args,
            )
        self.engine: AsyncEngine = create_async_engine(self.url, **engine_args)
        if self.is_sqlite:
            _configure_sqlite(self.engine)
        self._sessions = async_sessionmaker(self.engine, expire_on_commit=False, autoflush=False)
        # Same pool; the asyncpg dialect then simply sends no BEGIN/COMMIT.
        self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self._write_lock = asyncio.Lock()
        #: Behind PgBouncer in transaction pooling mode (`AUTHGATE_DB_PGBOUNCER`).
        self.pgbouncer = config.db_pgbouncer and not self.is_sqlite

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A read-write transaction, committed when the block ends without error."""
        if self.is_sqlite:
            async with self._write_lock, self._transaction("BEGIN IMMEDIATE") as session:
                yield session
        else:
            async with self._transaction(None) as session:
                yield session

    @contextlib.asynccontextmanager
    async def autocommit(self) -> AsyncIterator[AsyncConnection]:
        """A connection without an explicit transaction: each statement commits on its own.
        For single statements that are atomic by themselves (PostgreSQL's rotation).

        Behind PgBouncer the block is one transaction instead: PgBouncer keeps a client on
        one server connection only inside a transaction, and the driver's Parse and Execute
        of one statement must reach the same server."""
        if self.pgbouncer:
            async with self.engine.begin() as conn:
                yield conn
            return
        async with self._autocommit.connect() as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """A read-only transaction (a consistent snapshot; never takes SQLite's write lock)."""
        async with self._transaction("BEGIN" if self.is_sqlite else None) as session:
            yield session

    @contextlib.asynccontextmanager
    async def _transaction(self, begin_sql: str | None) -> AsyncIterator[AsyncSession]:
        async with self._sessions() as session:
            if begin_sql is not None:
                conn = await session.connection()
                await conn.exec_driver_sql(begin_sql)
            try:
                yield session
            except BaseException:
                await session.rollback()
                raise
            else:
                await session.commit()

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        await self.engine.dispose()


SQLITE_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def private_sqlite_files(db_file: Path) -> None:
    """The SQLite database and its -wal, -shm and -journal files readable by their owner only.

    A missing database file is created empty with mode 0600 before SQLite opens it: SQLite
    gives the journal, WAL and shared-memory files it creates the database file's mode, so
    they are 0600 too. Existing files that were wider are fixed, with a warning.
    """
    # A missing directory is SQLite's to report, with its own message.
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        os.close(os.open(db_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    for suffix in SQLITE_FILE_SUFFIXES:
        path = db_file.with_name(db_file.name + suffix)
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            os.chmod(path, 0o600)
            logger.warning("database file %s was mode %04o; now 0600", path, mode)


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let us issue BEGIN ourselves (IMMEDIATE for writes) instead of pysqlite's
        # implicit deferred BEGIN.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.close()


# --- migrations -------------------------------------------------------------------------


def _alembic_config(connection: Connection) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    cfg.attributes["connection"] = connection
    return cfg


def _upgrade(connection: Connection) -> None:
    from alembic import command

    command.upgrade(_alembic_config(connection), "head")


def _current_and_head(connection: Connection) -> tuple[str | None, str | None]:
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from authgate.store.migrations import VERSION_TABLE

    script = ScriptDirectory.from_config(_alembic_config(connection))
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision(), script.get_current_head()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


async def upgrade_schema(db: Database) -> bool:
    """Apply pending migrations; True when any ran.

    Safe when many workers or hosts start at once: PostgreSQL holds a transaction-level
    advisory lock around the check and the upgrade (one transaction), SQLite a file lock
    beside the database file, so one process migrates and the others find the schema at head.
    A database already at head costs one SELECT and no Alembic import (every worker start,
    every CLI command).
    """
    if await _at_head(db):
        return False
    if db.is_sqlite:
        db_file = _sqlite_file(db)
        lock = _file_lock(db_file.with_name(db_file.name + ".migrate-lock"))
        # The file lock blocks; take it off the event loop.
        await asyncio.to_thread(lock.__enter__)
        try:
            return await _upgrade_locked(db)
        finally:
            lock.__exit__(None, None, None)
    # A transaction-level advisory lock, taken in the transaction that checks and migrates:
    # a session-level lock would not survive PgBouncer's transaction pooling (the unlock could
    # reach another server connection). PostgreSQL's DDL is transactional, so the lock, the
    # check and the whole upgrade commit (or roll back) together.
    async with db.engine.connect() as conn:
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
        return await _upgrade_on(conn)


def _sqlite_file(db: Database) -> Path:
    return Path(db.url.database or "authgate.sqlite3")


async def schema_at_head(db: Database) -> bool:
    """Whether the schema is at the newest migration (one SELECT; no Alembic import)."""
    return await _at_head(db)


async def _at_head(db: Database) -> bool:
    from authgate.store.migrations import HEAD_REVISION, VERSION_TABLE

    if db.is_sqlite and not await asyncio.to_thread(_sqlite_file(db).exists):
        return False  # a new database (and maybe a new directory: the migration makes it)
    async with db.engine.connect() as conn:
        try:
            version = table(VERSION_TABLE, column("version_num"))
            rows = (await conn.execute(select(version.c.version_num))).all()
        except DBAPIError:  # no version table yet: a new database
            rows = []
        await conn.rollback()
    return [row[0] for row in rows] == [HEAD_REVISION]


async def _upgrade_locked(db: Database) -> bool:
    async with db.engine.connect() as conn:
        return await _upgrade_on(conn)


async def _upgrade_on(conn: AsyncConnection) -> bool:
    """Migrate to head on `conn`, in its transaction, committed; False when at head."""
    current, head = await conn.run_sync(_current_and_head)
    if current == head:
        await conn.rollback()
        return False
    logger.info("migrating database schema from %s to %s", current or "empty", head)
    await conn.run_sync(_upgrade)
    await conn.commit()
    return True
