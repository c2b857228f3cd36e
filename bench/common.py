"""What the harness and the scale script share: servers, wrk, databases, token loading."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
LUA = BENCH / "lua"
OUT = BENCH / "out"
VENV_BIN = Path(sys.executable).parent
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_HOST = "postgresql://postgres@127.0.0.1:5432"
REDIS_URL = "redis://127.0.0.1:6379/13"
SECRET_KEY = "bench-" + "k9Xq2Lm7Rt4Wv8Zp3Ns6Yc1Hb5Jd0Fg"
PEER_SECRET = "peer-bench-" + "Qw3Er5Ty7Ui9Op1As2Df4Gh6Jk8"
CEILING_SECRET = "ceiling-bench-" + "Zx1Cv3Bn5Mq7Wr9Ty2Ui4Op6As8"
PASSWORD = "Bench-Passw0rd-2024!x"
HOST = "127.0.0.1"


def nproc() -> int:
    return os.cpu_count() or 1


# --- databases ---------------------------------------------------------------------------


async def fresh_database(name: str) -> str:
    """Drop and create database `name`; its SQLAlchemy-free URL."""
    conn = await asyncpg.connect(PG_ADMIN)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return f"{PG_HOST}/{name}"


def clear_redis_prefix(prefix: str) -> int:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        n = 0
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(key)
            n += 1
        return n
    finally:
        client.close()


# --- servers -----------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    port: int
    workers: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def worker_pids(self) -> list[int]:
        """The processes that serve requests: the server itself with one worker, else the
        uvicorn worker children (multiprocessing spawn), not the supervisor."""
        if self.workers == 1:
            return [self.proc.pid]
        pids = []
        for child in _children(self.proc.pid):
            cmd = _cmdline(child)
            if "spawn_main" in cmd and "resource_tracker" not in cmd:
                pids.append(child)
        return pids


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(p) for p in fh.read().split()]
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def authgate_env(database_url: str, *, workers: int = 1, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url,
        CACHE_URL=REDIS_URL,
        AUTHGATE_SECRET_KEY=SECRET_KEY,
        # Every rate limit stays on, at its default budget, except those the load itself
        # would spend at once, raised so their checks still run on every request: the two
        # per client address (one address, hundreds of logins and registrations a second),
        # and the login-failure budgets of an account, which reserve a slot before the
        # password is verified (8 concurrent logins of one account from one address are
        # more than its 5 a minute, by design).
        AUTHGATE_LOGIN_LIMIT_PER_IP="100000000/minute",
        AUTHGATE_REGISTER_LIMIT_PER_IP="100000000/hour",
        AUTHGATE_LOGIN_FAILURE_LIMIT="100000000/hour",
        AUTHGATE_LOGIN_FAILURE_LIMIT_PER_ADDRESS="100000000/minute",
        AUTHGATE_CACHE_PREFIX="authgate-bench:",
        AUTHGATE_ACCESS_TTL="7200",
        AUTHGATE_DATA_DIR=str(OUT / "authgate-data"),
        AUTHGATE_COOKIE_SECURE="false",
    )
    env.update(extra)
    return env


def start_authgate(database_url: str, port: int, workers: int, **extra: str) -> Server:
    argv = [str(VENV_BIN / "authgate"), "serve", "--host", HOST, "--port", str(port)]
    argv += ["--workers", str(workers)]
    return _start("authgate", argv, authgate_env(database_url, **extra), port, workers)


def start_uvicorn(
    name: str, app: str, port: int, workers: int, env_extra: dict[str, str]
) -> Server:
    # authgate serve's settings: httptools + uvloop (uvicorn's "auto"), access log on, no
    # Server header, no proxy headers.
    argv = [str(VENV_BIN / "uvicorn"), app, "--host", HOST, "--port", str(port)]
    argv += ["--workers", str(workers), "--no-server-header", "--no-proxy-headers"]
    env = dict(os.environ)
    env.update(env_extra)
    env["PYTHONPATH"] = str(ROOT)
    return _start(name, argv, env, port, workers)


def _start(name: str, argv: list[str], env: dict[str, str], port: int, workers: int) -> Server:
    OUT.mkdir(exist_ok=True)
    log = OUT / f"{name}-{port}.log"
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            argv, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT
        )
    server = Server(name, port, workers, proc, log)
    OWN_GROUPS.add(proc.pid)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"{server.url}/health", timeout=1).status_code == 200 and (
                workers == 1 or len(server.worker_pids()) == workers
            ):
                time.sleep(0.5 if workers == 1 else 1.5)  # every worker past its lifespan
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop(server)
    raise RuntimeError(f"{name} did not answer /health within 60 s; see {log}")


def stop(server: Server) -> None:
    """SIGTERM the server's process group, SIGKILL after 10 s."""
    if server.proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.proc.pid, signal.SIGTERM)
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=10)


@contextlib.contextmanager
def running(*servers: Server) -> Iterator[tuple[Server, ...]]:
    try:
        yield servers
    finally:
        for s in servers:
            stop(s)


# --- wrk ---------------------------------------------------------------------------------


def require_wrk() -> str:
    path = shutil.which("wrk")
    if path is None:
        sys.exit(
            "bench: wrk is not installed. Install it from the system packages:\n"
            "  Debian/Ubuntu:  sudo apt-get update && sudo apt-get install -y wrk\n"
            "  Fedora:         sudo dnf install wrk\n"
            "  macOS:          brew install wrk"
        )
    return path


@dataclass
class Measurement:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int  # socket errors + timeouts + non-2xx/3xx answers
    rss_mb: float  # largest VmRSS of one worker seen during and right after the run
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


class RssSampler:
    """Samples the workers' VmRSS every 0.5 s in a thread; `peak` is the largest seen."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        for pid in self.server.worker_pids():
            self.peak = max(self.peak, rss_mb(pid))

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._sample()

    def __enter__(self) -> RssSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


_OURS = ("wrk", "postgres", "redis-server", "py-spy")


def _cpu_by_pid() -> dict[int, tuple[int, float]]:
    """pid -> (process group, CPU seconds so far) for every process we can read."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                raw = fh.read()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        if comm in _OURS or int(fields[2]) == 0:  # ours, or a kernel thread
            continue
        out[int(name)] = (int(fields[2]), (int(fields[11]) + int(fields[12])) / tick)
    return out


class ForeignCpu:
    """CPU used by processes that are not part of the benchmark (not our servers, wrk,
    PostgreSQL, Redis or this harness) while a measurement runs, in cores."""

    def __init__(self, own_groups: set[int]) -> None:
        self.own = own_groups | {os.getpgrp()}
        self.cores = 0.0

    def _foreign(self, snap: dict[int, tuple[int, float]]) -> dict[int, float]:
        return {pid: cpu for pid, (pgid, cpu) in snap.items() if pgid not in self.own}

    def __enter__(self) -> ForeignCpu:
        self._t0 = time.monotonic()
        self._before = self._foreign(_cpu_by_pid())
        return self

    def __exit__(self, *exc: object) -> None:
        after = self._foreign(_cpu_by_pid())
        used = sum(cpu - self._before.get(pid, 0.0) for pid, cpu in after.items())
        self.cores = used / max(time.monotonic() - self._t0, 1e-6)


def wait_for_quiet(own_groups: set[int], limit: float = 0.25, timeout: float = 45) -> float:
    """Wait (at most `timeout` s) until other processes use less than `limit` of a core over
    one second; returns the last reading."""
    deadline = time.monotonic() + timeout
    while True:
        with ForeignCpu(own_groups) as f:
            time.sleep(1.0)
        if f.cores < limit or time.monotonic() > deadline:
            if f.cores >= limit:
                print(f"  WARNING: other processes use {f.cores:.2f} cores; measuring anyway")
            return f.cores
        print(f"  waiting: other processes use {f.cores:.2f} cores", flush=True)


OWN_GROUPS: set[int] = set()


def wrk(
    server: Server,
    script: str,
    *,
    threads: int,
    connections: int,
    seconds: float,
    env: dict[str, str],
) -> Measurement:
    cmd = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "5s",
        "-s",
        str(LUA / script),
        server.url,
    ]
    full_env = dict(os.environ)
    full_env.update(env)
    full_env["BENCH_LUA_DIR"] = str(LUA)
    full_env["BENCH_THREADS"] = str(threads)
    wait_for_quiet(OWN_GROUPS)
    with RssSampler(server) as sampler, ForeignCpu(OWN_GROUPS) as foreign:
        done = subprocess.run(
            cmd, env=full_env, capture_output=True, text=True, timeout=seconds + 60, check=False
        )
    line = next((x for x in done.stdout.splitlines() if x.startswith("BENCH_JSON ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stdout}\n{done.stderr}")
    data = json.loads(line.removeprefix("BENCH_JSON "))
    errors = sum(data.pop(k) for k in ("connect", "read", "write", "status", "timeout"))
    return Measurement(
        requests=data.pop("requests"),
        seconds=data.pop("duration_us") / 1e6,
        p50_ms=data.pop("p50_us") / 1000,
        p99_ms=data.pop("p99_us") / 1000,
        errors=errors,
        rss_mb=sampler.peak,
        extra=data | {"foreign_cores": round(foreign.cores, 2)},
    )


# --- authgate rows, loaded directly ------------------------------------------------------


async def load_refresh_tokens(
    database_url: str, user_ids: Sequence[int], count: int, path: Path
) -> None:
    """Insert `count` live sessions with one fresh refresh token each (COPY), straight into
    authgate's tables, and write the plaintext tokens to `path`, one a line."""
    from authgate.config import AuthConfig
    from authgate.store.db import Database
    from authgate.store.models import RefreshToken, Session
    from authgate.tokens.keys import digest, new_opaque_token, new_session_id

    now = datetime.now(UTC)
    tokens = [new_opaque_token() for _ in range(count)]
    sessions = []
    refresh = []
    for i, token in enumerate(tokens):
        sid = new_session_id()
        sessions.append(
            (sid, user_ids[i % len(user_ids)], now, now + timedelta(days=30), None, None)
        )
        refresh.append((sid, digest(token), now, now + timedelta(days=14), None))
    db = Database(AuthConfig(database_url=database_url, secret_key=SECRET_KEY))
    try:
        async with db.write() as s:
            conn = await s.connection()
            raw = (await conn.get_raw_connection()).driver_connection
            await raw.copy_records_to_table(
                Session.__tablename__,
                records=sessions,
                columns=[
                    "id",
                    "user_id",
                    "created_at",
                    "expires_at",
                    "revoked_at",
                    "revoke_reason",
                ],
            )
            await raw.copy_records_to_table(
                RefreshToken.__tablename__,
                records=refresh,
                columns=["session_id", "digest", "created_at", "expires_at", "used_at"],
            )
    finally:
        await db.dispose()
    await asyncio.to_thread(path.write_text, "\n".join(tokens) + "\n")


async def user_ids(database_url: str, emails: Sequence[str]) -> list[int]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT id FROM authgate_users WHERE email_key = ANY($1::text[]) ORDER BY id",
            [e.lower() for e in emails],
        )
    finally:
        await conn.close()
    return [r["id"] for r in rows]


# --- small HTTP helpers (setup only, never timed) ----------------------------------------


def authgate_register(base: str, email: str) -> None:
    r = httpx.post(f"{base}/auth/register", json={"email": email, "password": PASSWORD}, timeout=30)
    if r.status_code not in (201, 409):
        raise RuntimeError(f"authgate register {email}: {r.status_code} {r.text}")


def authgate_login(base: str, email: str) -> dict[str, str]:
    r = httpx.post(f"{base}/auth/login", json={"email": email, "password": PASSWORD}, timeout=30)
    r.raise_for_status()
    return dict(r.json())


def peer_register(base: str, email: str) -> None:
    r = httpx.post(f"{base}/auth/register", json={"email": email, "password": PASSWORD}, timeout=30)
    if r.status_code not in (201, 400):
        raise RuntimeError(f"peer register {email}: {r.status_code} {r.text}")


def peer_login(base: str, email: str) -> str:
    r = httpx.post(
        f"{base}/auth/jwt/login", data={"username": email, "password": PASSWORD}, timeout=30
    )
    r.raise_for_status()
    return str(r.json()["access_token"])


def ceiling_token() -> str:
    import jwt

    now = int(time.time())
    claims = {"sub": "1", "iat": now, "exp": now + 7200, "iss": "bench", "aud": "bench"}
    claims["jti"] = secrets.token_urlsafe(12)
    return jwt.encode(claims, CEILING_SECRET, algorithm="HS256")
