"""cache/state.py without a shared cache: every lookup reads the database."""

from __future__ import annotations

from authgate.cache.state import DatabaseStates
from authgate.principal import SessionState
from tests.helpers import principal


async def test_without_a_shared_cache_every_lookup_reads_the_database() -> None:
    states = DatabaseStates()
    loads: list[str] = []
    expected = SessionState(principal(), False, None)

    async def load(session_id: str, user_id: int) -> SessionState | None:
        loads.append(session_id)
        return expected

    for _ in range(2):
        assert states.peek("s" * 32, 7) is None
        assert await states.lookup("s" * 32, 7, load=load) is expected
    assert loads == ["s" * 32, "s" * 32]
