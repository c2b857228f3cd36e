"""authgate on a big database: 1,000,000 users and 5,000,000 refresh tokens.

Run through `bench/run --scale [--quick]`. Steps, all against a fresh database
`authgate_scale` (and Redis db 13, prefix authgate-bench:):

1. start authgate (1 worker) on the empty schema and measure GET /me, login and refresh
   (the small-database figures), `--rounds` times, alternating the scenarios;
2. stop it and load the rows with COPY (asyncpg's copy_records_to_table): 1,000,000 users
   (one precomputed argon2id hash for all but the benchmark accounts), 1,000,000 sessions and
   5,000,000 refresh tokens (5 a session: 4 spent, 1 live). A share is finished on purpose,
   for the purge: 30 % of the sessions revoked, 10 % past their absolute end, and 40 % of the
   tokens expired. Foreign-key triggers are skipped during the load
   (session_replication_role=replica; the rows are consistent by construction), then ANALYZE;
3. start authgate again and measure the same scenarios on the big database;
4. run `authgate purge` and report what it prints (rows/s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import common as c

PORT = 18011
USERS = 1_000_000
SESSIONS = 1_000_000
TOKENS_PER_SESSION = 5
BATCH = 200_000


async def load(db: str, users: int, sessions: int, per_session: int) -> dict[str, float]:
    from argon2 import PasswordHasher

    from authgate.factors.hashing import ARGON2_MEMORY_KIB, ARGON2_PARALLELISM, ARGON2_TIME_COST
    from authgate.store.models import RefreshToken, Session, User

    hasher = PasswordHasher(
        time_cost=ARGON2_TIME_COST, memory_cost=ARGON2_MEMORY_KIB, parallelism=ARGON2_PARALLELISM
    )
    other_hash = hasher.hash(secrets.token_urlsafe(16))
    now = datetime.now(UTC)
    past = now - timedelta(days=1)
    timings: dict[str, float] = {}
    conn = await asyncpg.connect(db)
    try:
        await conn.execute("SET session_replication_role = replica")
        first_id = int(await conn.fetchval("SELECT coalesce(max(id), 0) FROM authgate_users")) + 1
        started = time.perf_counter()
        for lo in range(0, users, BATCH):
            rows = [
                (f"user{i}@scale.example.com", f"user{i}@scale.example.com", other_hash, True,
                 False, i % 2 == 0, now, now)
                for i in range(lo, min(users, lo + BATCH))
            ]  # fmt: skip
            await conn.copy_records_to_table(
                User.__tablename__,
                records=rows,
                columns=["email", "email_key", "password_hash", "is_active", "is_superuser",
                         "email_verified", "created_at", "updated_at"],
            )  # fmt: skip
            print(f"  users {min(users, lo + BATCH):,}", flush=True)
        timings["users_s"] = time.perf_counter() - started
        last_id = int(await conn.fetchval("SELECT max(id) FROM authgate_users"))

        started = time.perf_counter()
        n_tokens = 0
        for lo in range(0, sessions, BATCH):
            srows = []
            trows = []
            for i in range(lo, min(sessions, lo + BATCH)):
                sid = secrets.token_hex(16)
                uid = first_id + (i * 7919) % (last_id - first_id + 1)
                revoked = i % 10 < 3  # 30 %
                ended = i % 10 == 3  # 10 %
                srows.append(
                    (sid, uid, past - timedelta(days=20),
                     past if ended else now + timedelta(days=20),
                     past if revoked else None, "logout" if revoked else None)
                )  # fmt: skip
                for k in range(per_session):
                    live = k == per_session - 1
                    expired = (i * per_session + k) % 5 < 2  # 40 %
                    trows.append(
                        (sid, os.urandom(32), past - timedelta(days=20),
                         past if expired else now + timedelta(days=10),
                         None if live else past)
                    )  # fmt: skip
            await conn.copy_records_to_table(
                Session.__tablename__,
                records=srows,
                columns=["id", "user_id", "created_at", "expires_at", "revoked_at",
                         "revoke_reason"],
            )  # fmt: skip
            await conn.copy_records_to_table(
                RefreshToken.__tablename__,
                records=trows,
                columns=["session_id", "digest", "created_at", "expires_at", "used_at"],
            )
            n_tokens += len(trows)
            print(f"  sessions {min(sessions, lo + BATCH):,}, tokens {n_tokens:,}", flush=True)
        timings["sessions_tokens_s"] = time.perf_counter() - started
        started = time.perf_counter()
        await conn.execute("ANALYZE")
        timings["analyze_s"] = time.perf_counter() - started
    finally:
        await conn.close()
    return timings


def measure(
    db: str, label: str, rounds: int, seconds: float, results: list[dict[str, Any]]
) -> None:
    ag = c.start_authgate(db, PORT, 1)
    try:
        for email in ("login@bench.example.com", "me@bench.example.com"):
            c.authgate_register(ag.url, email)
        token = c.authgate_login(ag.url, "me@bench.example.com")["access_token"]
        ids = asyncio.run(c.user_ids(db, ["me@bench.example.com"]))
        login = json.dumps({"email": "login@bench.example.com", "password": c.PASSWORD})
        for rnd in range(1, rounds + 1):
            runs: list[tuple[str, str, int, dict[str, str]]] = [
                ("me", "get.lua", 32, {"BENCH_PATH": "/auth/me", "BENCH_TOKEN": token}),
                ("login", "post.lua", 8, {"BENCH_PATH": "/auth/login", "BENCH_BODY": login,
                                          "BENCH_CTYPE": "application/json"}),
            ]  # fmt: skip
            path = c.OUT / f"scale-tokens-{label}-{rnd}.txt"
            asyncio.run(c.load_refresh_tokens(db, ids, 30_000, path))
            runs.append(
                ("refresh", "refresh.lua", 32, {"BENCH_PATH": "/auth/refresh",
                                                "BENCH_TOKENS": str(path)})
            )  # fmt: skip
            try:
                for name, script, conns, env in runs:
                    m = c.wrk(ag, script, threads=2, connections=conns, seconds=seconds, env=env)
                    results.append({"db": label, "round": rnd, "scenario": name, "rps": m.rps,
                                    "p50_ms": m.p50_ms, "p99_ms": m.p99_ms, "errors": m.errors,
                                    "rss_mb": m.rss_mb, **m.extra})  # fmt: skip
                    print(
                        f"  {label:5} r{rnd} {name:8} {m.rps:9,.1f} req/s  p50 {m.p50_ms:6.1f} ms"
                        f"  p99 {m.p99_ms:6.1f} ms  errors {m.errors}  rss {m.rss_mb:.0f} MB",
                        flush=True,
                    )
            finally:
                path.unlink(missing_ok=True)
    finally:
        c.stop(ag)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="1 round, 3 s runs, 1/10 of the rows")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--seconds", type=float, default=None)
    args = p.parse_args()
    c.require_wrk()
    rounds = args.rounds or (1 if args.quick else 3)
    seconds = args.seconds or (3 if args.quick else 8)
    scale = 10 if args.quick else 1
    c.OUT.mkdir(exist_ok=True)
    db = asyncio.run(c.fresh_database("authgate_scale"))
    c.clear_redis_prefix("authgate-bench:")
    env = c.authgate_env(db)
    subprocess.run([str(c.VENV_BIN / "authgate"), "db", "upgrade"], env=env, check=True)
    results: list[dict[str, Any]] = []
    print("== small database", flush=True)
    measure(db, "small", rounds, seconds, results)
    print(f"== loading {USERS // scale:,} users, {SESSIONS // scale:,} sessions, "
          f"{SESSIONS // scale * TOKENS_PER_SESSION:,} refresh tokens", flush=True)  # fmt: skip
    timings = asyncio.run(load(db, USERS // scale, SESSIONS // scale, TOKENS_PER_SESSION))
    print(f"  load: {json.dumps({k: round(v, 1) for k, v in timings.items()})}", flush=True)
    print("== big database", flush=True)
    measure(db, "big", rounds, seconds, results)
    print("== authgate purge", flush=True)
    started = time.perf_counter()
    purge = subprocess.run(
        [str(c.VENV_BIN / "authgate"), "purge"], env=env, capture_output=True, text=True,
        timeout=3600, check=False,
    )  # fmt: skip
    purge_s = time.perf_counter() - started
    print(f"  {purge.stdout.strip()} {purge.stderr.strip()[-500:]} (wall {purge_s:.1f} s)")

    lines = ["| scenario | small req/s | big req/s | big/small | small p99 ms | big p99 ms |",
             "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name in ("me", "login", "refresh"):
        med = {}
        for label in ("small", "big"):
            rows = [r for r in results if r["db"] == label and r["scenario"] == name]
            med[label] = (statistics.median(r["rps"] for r in rows),
                          statistics.median(r["p99_ms"] for r in rows))  # fmt: skip
        ratio = med["big"][0] / med["small"][0] if med["small"][0] else 0
        lines.append(
            f"| {name} | {med['small'][0]:,.1f} | {med['big'][0]:,.1f} | {ratio:.2f} "
            f"| {med['small'][1]:.1f} | {med['big'][1]:.1f} |"
        )
    summary = "\n".join(lines) + f"\n\npurge: {purge.stdout.strip()} (wall {purge_s:.1f} s)\n"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (c.OUT / f"scale-{stamp}.json").write_text(
        json.dumps({"results": results, "load": timings, "purge": purge.stdout,
                    "purge_wall_s": purge_s, "summary": summary}, indent=1)
    )  # fmt: skip
    (c.OUT / "last-scale-summary.md").write_text(summary)
    print()
    print(summary)


if __name__ == "__main__":
    os.chdir(c.ROOT)
    sys.exit(main())
