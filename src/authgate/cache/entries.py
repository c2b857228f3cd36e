"""What session state puts in Redis: key names, entries and invalidation messages.

- `{prefix}session:{id}` holds `{user id}:{end}` (end in epoch seconds, empty for none) for a
  live session, or `revoked` (a tombstone, which readers never overwrite: SET NX).
- `{prefix}user:{id}` holds the user's principal as JSON, never the password hash.
- Invalidations are published on `{prefix}db{n}:invalidate` as `s|u ack_key id...`, where
  `ack_key` is the list every subscribed worker pushes to once it dropped the ids (`-`:
  nobody waits). The Redis database number is in the channel because pub/sub channels are
  global to a server and keys are not: two deployments on one server with the same prefix
  and different databases never hear each other.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from authgate.principal import Principal

__all__ = [
    "NO_ACK",
    "PUBLISH_CHUNK",
    "TOMBSTONE",
    "CachedState",
    "Keys",
    "message",
    "principal_entry",
    "read_principal",
    "read_session",
    "session_entry",
]

TOMBSTONE = b"revoked"
#: In a published message instead of an acknowledgement key: nobody waits (a retry).
NO_ACK = "-"
#: Ids per published message (a mass revocation goes out in several).
PUBLISH_CHUNK = 500


@dataclass(frozen=True, slots=True)
class CachedState:
    """A session as Redis holds it."""

    principal: Principal | None  # None: the session is known but its user entry is not
    revoked: bool
    expires_at: datetime | None


class Keys:
    """The names of one deployment's keys and channel."""

    def __init__(self, prefix: str, db: int) -> None:
        self._prefix = prefix
        self._scope = f"{prefix}db{db}:"
        self.channel = f"{self._scope}invalidate"

    def session(self, session_id: str) -> str:
        return f"{self._prefix}session:{session_id}"

    def user(self, user_id: int) -> str:
        return f"{self._prefix}user:{user_id}"

    def new_ack(self) -> str:
        return f"{self._scope}ack:{secrets.token_hex(8)}"


def message(kind: str, ack_key: str, ids: list[str]) -> str:
    return " ".join([kind, ack_key, *ids])


def session_entry(user_id: int, expires_at: datetime | None) -> str:
    expiry = str(int(expires_at.timestamp())) if expires_at is not None else ""
    return f"{user_id}:{expiry}"


def read_session(raw: bytes | str, user_id: int) -> CachedState:
    """The session entry `raw` as seen by a token of `user_id` (another user's: revoked)."""
    text = _text(raw)
    if text == TOMBSTONE.decode():
        return CachedState(principal=None, revoked=True, expires_at=None)
    owner, _, expiry = text.partition(":")
    if int(owner) != user_id:
        return CachedState(principal=None, revoked=True, expires_at=None)
    expires_at = datetime.fromtimestamp(int(expiry), UTC) if expiry else None
    return CachedState(principal=None, revoked=False, expires_at=expires_at)


def principal_entry(principal: Principal) -> str:
    return json.dumps(
        {
            "email": principal.email,
            "active": principal.is_active,
            "superuser": principal.is_superuser,
            "verified": principal.email_verified,
            "created": principal.created_at.timestamp(),
            "updated": principal.updated_at.timestamp(),
        }
    )


def read_principal(user_id: int, raw: bytes | str) -> Principal | None:
    """The principal in a user entry; None for an entry without `updated` (written by an
    older version: it expires within the entries' ttl, and meanwhile the database answers)."""
    data = json.loads(raw)
    if "updated" not in data:
        return None
    # Epoch seconds as floats round-trip to the microsecond for any date before 2242.
    return Principal(
        id=user_id,
        email=data["email"],
        is_active=data["active"],
        is_superuser=data["superuser"],
        email_verified=data["verified"],
        created_at=datetime.fromtimestamp(data["created"], UTC),
        updated_at=datetime.fromtimestamp(data["updated"], UTC),
    )


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
