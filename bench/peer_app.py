"""The peer: fastapi-users with SQLAlchemy and JWT, as its documentation sets it up.

This is the documented "SQLAlchemy + JWT bearer" example (fastapi-users 15: `db.py`,
`users.py`, `app.py` folded into one module) with two changes for a fair comparison:

- the password hasher is argon2id at authgate's parameters (m=19456 KiB, t=2, p=1) through
  the documented `PasswordHelper(PasswordHash(...))` hook, instead of pwdlib's heavier
  default (m=65536 KiB, t=3, p=4), so a login costs the same hash on both sides;
- a `/health` route, for the harness to know when the server is up.

fastapi-users has no refresh tokens with the JWT strategy and its JWT logout is a no-op.

Environment: PEER_DATABASE_URL (postgresql+asyncpg://...), PEER_SECRET.
Serve with: uvicorn bench.peer_app:app --workers N
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI  # noqa: TID251 - an app, not the service layer
from fastapi_users import BaseUserManager, FastAPIUsers, UUIDIDMixin, schemas
from fastapi_users.authentication import (
    AuthenticationBackend,
    BearerTransport,
    JWTStrategy,
)
from fastapi_users.db import SQLAlchemyBaseUserTableUUID, SQLAlchemyUserDatabase
from fastapi_users.password import PasswordHelper
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase

DATABASE_URL = os.environ.get(
    "PEER_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/bench_peer"
)
SECRET = os.environ.get("PEER_SECRET", "peer-secret-peer-secret-peer-secret-0")


class Base(DeclarativeBase):
    pass


class User(SQLAlchemyBaseUserTableUUID, Base):
    pass


engine = create_async_engine(DATABASE_URL)
async_session_maker = async_sessionmaker(engine, expire_on_commit=False)


async def create_db_and_tables() -> None:
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)


async def get_async_session() -> AsyncGenerator[AsyncSession, None]:
    async with async_session_maker() as session:
        yield session


async def get_user_db(
    session: AsyncSession = Depends(get_async_session),  # noqa: B008 - the docs' style
) -> AsyncGenerator[SQLAlchemyUserDatabase, None]:
    yield SQLAlchemyUserDatabase(session, User)


class UserRead(schemas.BaseUser[uuid.UUID]):
    pass


class UserCreate(schemas.BaseUserCreate):
    pass


class UserUpdate(schemas.BaseUserUpdate):
    pass


password_helper = PasswordHelper(
    PasswordHash((Argon2Hasher(time_cost=2, memory_cost=19_456, parallelism=1),))
)


class UserManager(UUIDIDMixin, BaseUserManager[User, uuid.UUID]):
    reset_password_token_secret = SECRET
    verification_token_secret = SECRET


async def get_user_manager(
    user_db: SQLAlchemyUserDatabase = Depends(get_user_db),  # noqa: B008
) -> AsyncGenerator[UserManager, None]:
    yield UserManager(user_db, password_helper)


bearer_transport = BearerTransport(tokenUrl="auth/jwt/login")


def get_jwt_strategy() -> JWTStrategy:
    return JWTStrategy(secret=SECRET, lifetime_seconds=3600)


auth_backend = AuthenticationBackend(
    name="jwt", transport=bearer_transport, get_strategy=get_jwt_strategy
)
fastapi_users = FastAPIUsers[User, uuid.UUID](get_user_manager, [auth_backend])
current_active_user = fastapi_users.current_user(active=True)


@asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncGenerator[None, None]:
    await create_db_and_tables()
    yield
    await engine.dispose()


app = FastAPI(lifespan=lifespan)
app.include_router(fastapi_users.get_auth_router(auth_backend), prefix="/auth/jwt", tags=["auth"])
app.include_router(
    fastapi_users.get_register_router(UserRead, UserCreate), prefix="/auth", tags=["auth"]
)
app.include_router(
    fastapi_users.get_users_router(UserRead, UserUpdate), prefix="/users", tags=["users"]
)


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}
