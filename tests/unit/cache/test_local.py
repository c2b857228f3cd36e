"""cache/local.py: a worker's own copy of session state, used only within its lease."""

from __future__ import annotations

from authgate.cache.local import LocalState
from tests.helpers import MonotonicClock, principal


def test_local_state_answers_only_within_its_lease() -> None:
    t = MonotonicClock()
    local = LocalState(ttl=60, lease=1.5, clock=t)
    assert local.get("s" * 32, 7) is None
    local.put(local.generation, "s" * 32, principal(), None)
    assert local.get("s" * 32, 7) is None  # not subscribed: nothing is stored
    local.reset(live=True)
    local.put(local.generation, "s" * 32, principal(), None)
    hit = local.get("s" * 32, 7)
    assert hit is not None
    assert not hasattr(hit.principal, "password_hash")  # the copy never holds the hash
    assert local.get("s" * 32, 8) is None  # another user's token for that session id
    t.t += 1.6  # the subscription went quiet
    assert local.get("s" * 32, 7) is None
    local.heard()
    assert local.get("s" * 32, 7) is not None
    t.t += 61  # and entries expire with the ttl
    local.heard()
    assert local.get("s" * 32, 7) is None


def test_local_state_discards_a_fill_that_raced_an_invalidation() -> None:
    local = LocalState(ttl=60, clock=MonotonicClock())
    local.reset(live=True)
    generation = local.generation  # a reader starts loading the session...
    local.drop_sessions(["s" * 32])  # ...the session is revoked meanwhile...
    local.put(generation, "s" * 32, principal(), None)  # ...and the reader's fill arrives
    assert local.get("s" * 32, 7) is None
    generation = local.generation
    local.drop_user(7)
    local.put(generation, "s" * 32, principal(), None)
    assert local.get("s" * 32, 7) is None


def test_local_state_is_bounded() -> None:
    local = LocalState(ttl=60, max_entries=3, clock=MonotonicClock())
    local.reset(live=True)
    for i in range(5):
        local.put(local.generation, f"{i:032d}", principal(i), None)
    assert local.get(f"{0:032d}", 0) is None
    assert local.get(f"{4:032d}", 4) is not None
