"""GET /metrics of a real `authgate serve --workers 2` on PostgreSQL + Redis (contract §10):
whichever worker answers the scrape, it reports the sum over both; a worker killed and
restarted by uvicorn, or all of them replaced on SIGHUP, loses nothing counted and doubles
nothing; the per-run directory is fresh, private and gone when the server stops."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from prometheus_client.mmap_dict import MmapedDict

from tests.helpers import (
    PASSWORD,
    TEST_SECRET,
    Backend,
    Samples,
    Server,
    clean_env,
    metric,
    parse_metrics,
    register_and_login,
    serving,
)

pytestmark = pytest.mark.subprocess

ANN = "ann@example.com"
LOGINS = "authgate_logins_total"
SCRAPES = 8
MAX_LOGINS = 40


def _workers(server: Server) -> list[int]:
    """The serve process's worker processes (uvicorn spawns them with Python's `spawn`,
    next to multiprocessing's resource tracker, which has no metrics directory)."""
    pids = []
    for task in Path(f"/proc/{server.process.pid}/task").iterdir():
        pids += [int(p) for p in (task / "children").read_text().split()]
    return [pid for pid in pids if _metrics_dir(pid) is not None and not _tracker(pid)]


def _tracker(pid: int) -> bool:
    try:
        return b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False


def _metrics_dir(pid: int) -> Path | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return None
    for item in environ:
        if item.startswith(b"PROMETHEUS_MULTIPROC_DIR="):
            return Path(item.split(b"=", 1)[1].decode())
    return None


def _logins_in_file(directory: Path, pid: int) -> float:
    """Successful logins counted by one worker: its own file, read without summing."""
    total = 0.0
    path = directory / f"counter_{pid}.db"
    if not path.exists():  # the worker has counted nothing yet
        return total
    entries = MmapedDict.read_all_values_from_file(str(path))  # type: ignore[no-untyped-call]
    for key, value, *_ in entries:
        _, name, labels, *_ = json.loads(key)
        if name == LOGINS and labels.get("outcome") == "success":
            total += value
    return total


def _scrape(server: Server) -> Samples:
    """GET /metrics on a new connection: either worker may answer."""
    response = server.get("/metrics")
    assert response.status_code == 200, response.text
    return parse_metrics(response.text)


def _logins(server: Server, count: int) -> None:
    for _ in range(count):
        response = server.post("/auth/login", json={"email": ANN, "password": PASSWORD})
        assert response.status_code == 200, response.text


def _wait_for(what: str, check: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.2)):
        if callable(check) and check():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def test_two_workers_report_the_sum_and_survive_a_restart(
    pg_backend: Backend, tmp_path: Path
) -> None:
    env = clean_env(pg_backend.env, secret=TEST_SECRET)
    with serving(env, tmp_path / "logs", "--workers", "2") as server:
        workers = _workers(server)
        assert len(workers) == 2, workers
        [directory] = {_metrics_dir(pid) for pid in workers}
        assert directory is not None
        assert directory.is_dir()
        assert directory.stat().st_mode & 0o077 == 0  # this run's alone
        register_and_login(server)
        logins = 1
        # Logins on new connections until both workers have answered some (bounded).
        while logins < MAX_LOGINS and not all(_logins_in_file(directory, p) for p in workers):
            _logins(server, 1)
            logins += 1
        per_worker = [_logins_in_file(directory, pid) for pid in workers]
        assert all(per_worker), per_worker
        assert sum(per_worker) == logins
        # Request counts reach the shared files within FLUSH_INTERVAL (metrics.py); the
        # login counters at once. Then every scrape, whichever worker answers, has the sum.
        _wait_for(
            "the request counts",
            lambda: (
                metric(_scrape(server), "authgate_http_requests_total", route="/auth/login")
                == logins
            ),
        )
        for _ in range(SCRAPES):
            samples = _scrape(server)
            assert metric(samples, LOGINS, outcome="success") == logins
            assert metric(samples, "authgate_registrations_total", outcome="success") == 1
            assert metric(samples, "authgate_http_requests_total", route="/auth/login") == logins

        # A worker dies; uvicorn starts another in its place.
        dead = workers[0]
        os.kill(dead, signal.SIGKILL)
        _wait_for(
            "the replacement worker",
            lambda: len(_workers(server)) == 2 and dead not in _workers(server),
        )
        _wait_for("the server to answer", lambda: server.get("/health").status_code == 200)
        # Its live gauge is dropped (mark_process_dead), its counters stay in the sum.
        _wait_for(
            "the dead worker's live gauge to go",
            lambda: not (directory / f"gauge_livesum_{dead}.db").exists(),
        )
        assert (directory / f"counter_{dead}.db").exists()
        _logins(server, 4)
        for _ in range(SCRAPES):
            samples = _scrape(server)
            # Nothing the dead worker counted is lost, nothing is counted twice.
            assert metric(samples, LOGINS, outcome="success") == logins + 4
            assert metric(samples, "authgate_password_hash_pending") == 0

        # SIGHUP: uvicorn replaces every worker, one after the other (a graceful restart).
        before = set(_workers(server))
        os.kill(server.process.pid, signal.SIGHUP)
        _wait_for(
            "two new workers",
            lambda: len(_workers(server)) == 2 and not before & set(_workers(server)),
            timeout=60.0,
        )
        _wait_for("the server to answer", lambda: server.get("/health").status_code == 200)
        _logins(server, 1)
        _wait_for(
            "the request counts",
            lambda: (
                metric(_scrape(server), "authgate_http_requests_total", route="/auth/login")
                == logins + 5
            ),
        )
        for _ in range(SCRAPES):
            samples = _scrape(server)
            assert metric(samples, LOGINS, outcome="success") == logins + 5
    # The run's directory goes with the server.
    assert not directory.exists()
