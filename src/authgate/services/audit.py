"""The audit log's writer: an `events.Sink` that keeps each event for `authgate_audit_events`.

The trade-off, chosen and written down (issue 15): the writer does NOT insert in the
transaction of the step it records. Each event is appended to a bounded in-memory buffer of
the worker (a dict copy, no I/O: nothing a login or a refresh waits for) and a background task
writes the buffer in batches, one multi-row INSERT every `interval` seconds (0.5) or as soon as
`batch` rows (200) are waiting, and once more when the application shuts down
(`AuthGate.lifespan`, the CLI's `_run`).

- What it costs: nothing measurable per request; one INSERT per batch per worker. A write in
  the step's own transaction would add a statement (a round trip, and on SQLite the single
  writer lock held longer) to every login and refresh, and a failed-login record has no
  transaction to join at all (nothing else is written).
- What it risks: a worker that dies without shutting down (SIGKILL, power loss) loses the
  events of at most one interval. A graceful stop (SIGTERM) flushes; a database that is
  away at that moment loses what was still waiting (warned).
- When the database is slower than the events (or away): the buffer holds `capacity` rows
  (10 000); beyond that the OLDEST waiting rows are dropped, counted in `dropped`, and a
  warning is logged at most once a minute. A login never waits for the audit log. A batch
  whose INSERT fails goes back to the front of the buffer (as much as fits) and is retried
  at the next interval.

Only the record's fixed keys are stored (`store.audit.COLUMNS`); `events.emit` puts no
secret in a record, and nothing else reaches the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from authgate.config import AuthConfig
from authgate.services.context import Clock
from authgate.store.audit import AuditStore, row_values
from authgate.store.db import Database

__all__ = ["AuditWriter"]

logger = logging.getLogger("authgate")

#: Seconds between two "audit events dropped" warnings.
WARN_EVERY = 60.0


class AuditWriter:
    """`writer(record)` buffers one event; `await writer.flush()` writes what waits;
    `await writer.close()` stops the background task and writes the rest."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        capacity: int = 10_000,
        batch: int = 200,
        interval: float = 0.5,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._clock = clock
        self.capacity = capacity
        self.batch = batch
        self.interval = interval
        self._monotonic = monotonic
        self._buffer: deque[dict[str, Any]] = deque()
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._warned_at: float | None = None
        #: Events lost because the buffer was full (or a failed batch did not fit back).
        self.dropped = 0

    @classmethod
    def for_config(cls, config: AuthConfig, db: Database, clock: Clock) -> AuditWriter | None:
        """The writer, or None when `audit_retention_days` is 0 (the audit log is off)."""
        return cls(db, clock) if config.audit_retention_days > 0 else None

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def __call__(self, record: Mapping[str, Any]) -> None:
        if len(self._buffer) >= self.capacity:
            self._buffer.popleft()
            self._lost(1, "the audit buffer is full")
        self._buffer.append(row_values(self._clock(), record))
        self._ensure_task()

    def _ensure_task(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop: the row waits for the next flush()
            return
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._stopping = False
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run(), name="authgate-audit-writer")
        elif len(self._buffer) >= self.batch:
            self._wake.set()

    async def _run(self) -> None:
        wake = self._wake
        while not self._stopping:
            # asyncio.timeout, not wait_for: no task made per wait (3.11's wait_for makes one).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await wake.wait()
            wake.clear()
            # Shielded: a cancelled task never loses the rows of a batch it has taken.
            await asyncio.shield(self.flush())

    async def flush(self) -> int:
        """Write every waiting row, `batch` rows per INSERT; the rows written. A failed
        INSERT puts its rows back (as many as fit) and ends this flush."""
        written = 0
        async with self._lock:
            while self._buffer:
                rows = [self._buffer.popleft() for _ in range(min(self.batch, len(self._buffer)))]
                try:
                    async with self._db.write() as s:
                        await AuditStore(s).add_many(rows)
                except Exception as exc:
                    room = max(self.capacity - len(self._buffer), 0)
                    kept = rows[len(rows) - room :] if room < len(rows) else rows
                    self._buffer.extendleft(reversed(kept))
                    # The type only: a driver's message may quote the statement's values.
                    self._lost(len(rows) - len(kept), f"writing failed ({type(exc).__name__})")
                    return written
                written += len(rows)
        return written

    async def close(self) -> None:
        """Stop the background task (letting a batch in flight finish) and write the rest."""
        task, self._task = self._task, None
        self._stopping = True
        self._wake.set()
        if task is not None and not task.done():
            if task.get_loop() is asyncio.get_running_loop():
                await asyncio.wait([task], timeout=30)
            task.cancel()
        await self.flush()

    def _lost(self, count: int, why: str) -> None:
        self.dropped += count
        now = self._monotonic()
        if self._warned_at is None or now - self._warned_at >= WARN_EVERY:
            self._warned_at = now
            logger.warning(
                "audit log: %s; %d events waiting, %d dropped since start",
                why,
                len(self._buffer),
                self.dropped,
            )
