"""Metrics summed over the workers of `authgate serve --workers N` (prometheus_client's
multiprocess mode).

`per_run_directory` makes a fresh, private directory for this run, puts it in
`PROMETHEUS_MULTIPROC_DIR` before uvicorn spawns a worker (a spawned worker reads it when it
first imports prometheus_client, so every value it records goes to a file there), watches it
while the server runs, and removes it when the server stops. A fresh directory per run: files
left by an earlier run would be summed into this one's counters.

uvicorn's supervisor restarts a worker that died (and replaces them all on SIGHUP) without
telling anyone; the watcher here sees a worker's files whose process is gone and calls
`multiprocess.mark_process_dead` for it. What that means for each kind of metric:

- counters and histograms: a dead worker's file stays and keeps being summed, so nothing it
  counted is lost, and its replacement writes a file of its own (another pid), so nothing is
  counted twice;
- the live gauges (`multiprocess_mode="livesum"`, `authgate_password_hash_pending`): the dead
  worker's value is dropped (it was the queue of a process that no longer exists).

Killed with SIGKILL, the parent cannot remove the directory: it is under the system's
temporary directory, named `authgate-metrics-*`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import multiprocess

from authgate.metrics import MULTIPROC_ENV

__all__ = ["WATCH_INTERVAL", "dead_workers", "per_run_directory"]

#: Seconds between two looks for workers that exited.
WATCH_INTERVAL = 1.0
#: `<kind>_<pid>.db`, and `gauge_<mode>_<pid>.db` (prometheus_client's file names).
_FILE = re.compile(r"_(\d+)\.db$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal sent: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - someone else's process reuses the pid
        return True
    return True


def dead_workers(path: Path, known_dead: set[int]) -> list[int]:
    """Pids with files under `path` whose process is gone (and not yet marked)."""
    pids = {int(m.group(1)) for f in path.iterdir() if (m := _FILE.search(f.name))}
    return sorted(pid for pid in pids - known_dead if pid != os.getpid() and not _alive(pid))


def _watch(path: Path, stop: threading.Event) -> None:
    marked: set[int] = set()
    while not stop.wait(WATCH_INTERVAL):
        for pid in dead_workers(path, marked):
            multiprocess.mark_process_dead(pid, str(path))  # type: ignore[no-untyped-call]
            marked.add(pid)


@contextlib.contextmanager
def per_run_directory(workers: int) -> Iterator[Path | None]:
    """With more than one worker: the run's directory (see the module's docstring); with
    one, nothing (the worker is this process: a normal registry)."""
    if workers < 2:
        yield None
        return
    path = Path(tempfile.mkdtemp(prefix="authgate-metrics-"))  # mode 0700: ours alone
    previous = os.environ.get(MULTIPROC_ENV)
    os.environ[MULTIPROC_ENV] = str(path)
    stop = threading.Event()
    watcher = threading.Thread(
        target=_watch, args=(path, stop), name="authgate-metrics-watch", daemon=True
    )
    watcher.start()
    try:
        yield path
    finally:
        stop.set()
        watcher.join(timeout=5)
        if previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous
        shutil.rmtree(path, ignore_errors=True)
