"""authgate against fastapi-users, and both against their ceilings. Run through `bench/run`.

For each worker count (1, then 2) it starts authgate, the fastapi-users peer and the JWT-only
ceiling app side by side on loopback (fresh PostgreSQL databases, one Redis), then runs every
scenario round after round, alternating the apps within each scenario (authgate, peer,
ceiling). The table holds the medians over the rounds and the ratios computed from them.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import common as c
import db_ceiling
import features
import httpx

PORTS = {"authgate": 18001, "peer": 18002, "ceiling": 18003, "mounted": 18004}


@dataclass
class Settings:
    rounds: int
    seconds: float
    hash_seconds: float
    workers: list[int]
    refresh_tokens: int
    scenarios: list[str]


ALL_SCENARIOS = ["me", "login", "register", "refresh", "mixed", "overload"]


# --- ceilings ------------------------------------------------------------------------------


def hash_ceiling(seconds: float) -> float:
    """argon2id hashes per second at authgate's parameters, one thread per core."""
    from argon2 import PasswordHasher

    from authgate.factors.hashing import ARGON2_MEMORY_KIB, ARGON2_PARALLELISM, ARGON2_TIME_COST

    hasher = PasswordHasher(
        time_cost=ARGON2_TIME_COST, memory_cost=ARGON2_MEMORY_KIB, parallelism=ARGON2_PARALLELISM
    )
    hasher.hash("warm-up password")
    deadline = time.perf_counter() + seconds
    counts = [0] * c.nproc()

    def work(i: int) -> None:
        while time.perf_counter() < deadline:
            hasher.hash("correct horse battery staple")
            counts[i] += 1

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(c.nproc()) as pool:
        list(pool.map(work, range(c.nproc())))
    return sum(counts) / (time.perf_counter() - started)


# --- the overload scenario (open loop, so it can offer more than is served) -----------------


async def _post_once(host: str, port: int, path: str, body: bytes) -> tuple[int, bool]:
    """One POST on its own connection (a herd of clients, no client-side pool to queue in):
    (status, has Retry-After)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        return status, b"\r\nretry-after:" in head.lower()
    finally:
        writer.close()


async def _overload(url: str, body: dict[str, str], rate: float, seconds: float) -> dict[str, Any]:
    """Open loop: `rate` logins a second for `seconds`, whatever the answers; each request's
    status and latency."""
    parsed = httpx.URL(url)
    payload = json.dumps(body).encode()
    total = int(rate * seconds)
    results: list[tuple[int, float, bool]] = []

    async def one() -> None:
        started = time.perf_counter()
        try:
            status, retry = await asyncio.wait_for(
                _post_once(parsed.host, parsed.port or 80, parsed.path, payload), 15
            )
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
            status, retry = 0, False
        results.append((status, time.perf_counter() - started, retry))

    tasks = []
    t0 = time.perf_counter()
    for i in range(total):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    ok = sorted(lat for status, lat, _ in results if status == 200)
    busy = [x for x in results if x[0] == 503]
    other = len(results) - len(ok) - len(busy)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))] * 1000 if values else 0.0

    return {
        "offered": total,
        "offered_rate": rate,
        "answered_rps": len(ok) / elapsed,
        "answered_p50_ms": pct(ok, 0.50),
        "answered_p99_ms": pct(ok, 0.99),
        "share_503": len(busy) / max(1, len(results)),
        "all_503_have_retry_after": all(x[2] for x in busy),
        "p99_503_ms": pct(sorted(x[1] for x in busy), 0.99),
        "other_errors": other,
        "elapsed": elapsed,
    }


def overload(server: c.Server, rate: float, seconds: float) -> c.Measurement:
    body = {"email": "login@bench.example.com", "password": c.PASSWORD}
    c.wait_for_quiet(c.OWN_GROUPS)
    with c.RssSampler(server) as sampler, c.ForeignCpu(c.OWN_GROUPS) as foreign:
        out = asyncio.run(_overload(f"{server.url}/auth/login", body, rate, seconds))
    out["foreign_cores"] = round(foreign.cores, 2)
    return c.Measurement(
        requests=int(out["answered_rps"] * out["elapsed"]),
        seconds=out["elapsed"],
        p50_ms=out["answered_p50_ms"],
        p99_ms=out["answered_p99_ms"],
        errors=out["other_errors"],
        rss_mb=sampler.peak,
        extra=out,
    )


# --- revocation must still work at once with the cache -------------------------------------


def revocation_check(server: c.Server, db_url: str, tag: str) -> dict[str, Any]:
    """Warm the state cache on every worker, then revoke (logout) and deactivate: the very
    next GET /me requests must all be 401. New connections, so both workers answer."""

    def me_codes(token: str, n: int = 20) -> list[int]:
        return [
            httpx.get(
                f"{server.url}/auth/me", headers={"Authorization": f"Bearer {token}"}, timeout=10
            ).status_code
            for _ in range(n)
        ]

    out: dict[str, Any] = {}
    email = f"revoke-{tag}@bench.example.com"
    c.authgate_register(server.url, email)
    tokens = c.authgate_login(server.url, email)
    before = me_codes(tokens["access_token"])
    httpx.post(
        f"{server.url}/auth/logout", json={"refresh_token": tokens["refresh_token"]}, timeout=10
    ).raise_for_status()
    after = me_codes(tokens["access_token"])
    out["logout"] = {"before_200": before.count(200), "after_401": after.count(401), "n": 20}

    email = f"deact-{tag}@bench.example.com"
    c.authgate_register(server.url, email)
    tokens = c.authgate_login(server.url, email)
    before = me_codes(tokens["access_token"])
    subprocess.run(
        [str(c.VENV_BIN / "authgate"), "users", "deactivate", email],
        env=c.authgate_env(db_url),
        check=True,
        capture_output=True,
        timeout=60,
    )
    after = me_codes(tokens["access_token"])
    out["deactivate"] = {"before_200": before.count(200), "after_401": after.count(401), "n": 20}
    out["ok"] = all(v["before_200"] == 20 and v["after_401"] == 20 for v in out.values())
    return out


# --- profiles ---------------------------------------------------------------------------


def profile(server: c.Server, name: str, seconds: float, run: Callable[[], Any]) -> None:
    """py-spy (raw collapsed stacks) of the single worker while `run()` loads it."""
    pid = server.worker_pids()[0]
    c.BENCH.joinpath("profiles").mkdir(exist_ok=True)
    raw = c.OUT / f"{name}.folded"
    cmd = [str(c.VENV_BIN / "py-spy"), "record", "--pid", str(pid), "--duration", str(int(seconds))]
    cmd += ["--rate", "250", "--format", "raw", "--output", str(raw), "--nonblocking"]
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        result = run()
    finally:
        spy.wait(timeout=seconds + 30)
    print(f"  profile {name}: {result.rps:,.0f} req/s under py-spy -> {raw.relative_to(c.ROOT)}")
    summarise_profile(raw)
    # The collapsed stacks are large: keep them compressed beside the summary.
    with raw.open("rb") as src, gzip.open(c.BENCH / "profiles" / f"{raw.name}.gz", "wb") as dst:
        dst.write(src.read())


def summarise_profile(raw: Path, top: int = 30) -> None:
    """Self and inclusive sample shares per function, from py-spy's collapsed stacks."""
    self_counts: dict[str, int] = defaultdict(int)
    incl_counts: dict[str, int] = defaultdict(int)
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        count = int(n)
        total += count
        frames = stack.split(";")
        self_counts[frames[-1]] += count
        for f in set(frames):
            incl_counts[f] += count
    lines = [f"# {raw.name}: {total} samples", "", "## self time", ""]
    for f, n in sorted(self_counts.items(), key=lambda x: -x[1])[:top]:
        lines.append(f"{100 * n / total:5.1f}%  {f}")
    lines += ["", "## inclusive time", ""]
    for f, n in sorted(incl_counts.items(), key=lambda x: -x[1])[: top * 2]:
        lines.append(f"{100 * n / total:5.1f}%  {f}")
    (c.BENCH / "profiles" / raw.with_suffix(".txt").name).write_text("\n".join(lines) + "\n")


# --- the run -----------------------------------------------------------------------------


class Bench:
    def __init__(self, settings: Settings, db: str, peer_db: str) -> None:
        self.s = settings
        self.db = db
        self.peer_db = peer_db
        self.records: list[dict[str, Any]] = []
        self.hash_rates: list[float] = []
        self.checks: list[dict[str, Any]] = []
        self.tag = str(int(time.time()))
        self.counter = 0
        #: The feature phase (`features.py`): one row per measurement.
        self.feature_records: list[dict[str, Any]] = []

    def record(self, rnd: int, workers: int, scenario: str, app: str, m: c.Measurement) -> None:
        row = {"round": rnd, "workers": workers, "scenario": scenario, "app": app}
        row |= asdict(m) | {"rps": m.rps}
        self.records.append(row)
        extra = "".join(
            f" {k}={v:.3g}" if isinstance(v, float) else f" {k}={v}" for k, v in m.extra.items()
        )
        print(
            f"  r{rnd} {workers}w {scenario:9} {app:8} {m.rps:9,.1f} req/s  p50 {m.p50_ms:7.1f} ms"
            f"  p99 {m.p99_ms:7.1f} ms  errors {m.errors}  rss {m.rss_mb:5.1f} MB{extra}",
            flush=True,
        )

    def prepare_features(self) -> None:
        """The benchmark account, for a run of the feature phase alone (fresh database)."""
        ag = c.start_authgate(self.db, PORTS["authgate"], 1)
        try:
            c.authgate_register(ag.url, "me@bench.example.com")
        finally:
            c.stop(ag)

    def setup_accounts(self, ag: c.Server, peer: c.Server) -> None:
        for email in ("login@bench.example.com", "me@bench.example.com", "mixed@bench.example.com"):
            c.authgate_register(ag.url, email)
            c.peer_register(peer.url, email)

    def phase(self, workers: int) -> None:
        sv = self.s
        print(f"== {workers} worker(s): starting authgate, peer, ceiling", flush=True)
        ag = c.start_authgate(self.db, PORTS["authgate"], workers)
        servers = [ag]
        try:
            peer = c.start_uvicorn(
                "peer",
                "bench.peer_app:app",
                PORTS["peer"],
                workers,
                {"PEER_DATABASE_URL": self.peer_db, "PEER_SECRET": c.PEER_SECRET},
            )
            servers.append(peer)
            ceiling = c.start_uvicorn(
                "ceiling",
                "bench.jwt_ceiling:app",
                PORTS["ceiling"],
                workers,
                {"CEILING_SECRET": c.CEILING_SECRET},
            )
            servers.append(ceiling)
            # The mounted example (examples/mount_fastapi.py): a host application's own route
            # behind `CurrentUser`, on the same database, cache and key as authgate.
            mounted = c.start_uvicorn(
                "mounted",
                "examples.mount_fastapi:app",
                PORTS["mounted"],
                workers,
                c.authgate_env(self.db),
            )
            servers.append(mounted)
            self.setup_accounts(ag, peer)
            ag_token = c.authgate_login(ag.url, "me@bench.example.com")["access_token"]
            peer_token = c.peer_login(peer.url, "me@bench.example.com")
            ids = asyncio.run(c.user_ids(self.db, ["me@bench.example.com"]))
            for rnd in range(1, sv.rounds + 1):
                c.wait_for_quiet(c.OWN_GROUPS)
                rate = hash_ceiling(sv.hash_seconds)
                self.hash_rates.append(rate)
                print(f"  r{rnd} {workers}w argon2id ceiling {rate:.1f} hashes/s", flush=True)
                self.round(
                    rnd, workers, ag, peer, ceiling, mounted, ag_token, peer_token, ids, rate
                )
                if rnd == 1:
                    check = revocation_check(ag, self.db, f"{self.tag}-{workers}")
                    check["workers"] = workers
                    self.checks.append(check)
                    print(f"  revocation check: {json.dumps(check)}", flush=True)
        finally:
            for server in servers:
                c.stop(server)

    def round(
        self,
        rnd: int,
        workers: int,
        ag: c.Server,
        peer: c.Server,
        ceiling: c.Server,
        mounted: c.Server,
        ag_token: str,
        peer_token: str,
        ids: list[int],
        hash_rate: float,
    ) -> None:
        sv = self.s
        t = sv.seconds
        login_json = json.dumps({"email": "login@bench.example.com", "password": c.PASSWORD})
        peer_form = f"username=login@bench.example.com&password={c.PASSWORD}"
        for scenario in sv.scenarios:
            if scenario == "me":
                runs = [
                    ("authgate", ag, {"BENCH_PATH": "/auth/me", "BENCH_TOKEN": ag_token}),
                    ("peer", peer, {"BENCH_PATH": "/users/me", "BENCH_TOKEN": peer_token}),
                    ("ceiling", ceiling, {"BENCH_PATH": "/me", "BENCH_TOKEN": c.ceiling_token()}),
                    ("mounted", mounted, {"BENCH_PATH": "/hello", "BENCH_TOKEN": ag_token}),
                ]
                for app, server, env in runs:
                    m = c.wrk(server, "get.lua", threads=2, connections=32, seconds=t, env=env)
                    self.record(rnd, workers, scenario, app, m)
            elif scenario == "login":
                runs = [
                    ("authgate", ag, "/auth/login", login_json, "application/json"),
                    (
                        "peer",
                        peer,
                        "/auth/jwt/login",
                        peer_form,
                        "application/x-www-form-urlencoded",
                    ),
                ]
                for app, server, path, body, ctype in runs:
                    env = {"BENCH_PATH": path, "BENCH_BODY": body, "BENCH_CTYPE": ctype}
                    m = c.wrk(server, "post.lua", threads=2, connections=8, seconds=t, env=env)
                    self.record(rnd, workers, scenario, app, m)
            elif scenario == "register":
                for app, server in (("authgate", ag), ("peer", peer)):
                    self.counter += 1
                    env = {
                        "BENCH_PATH": "/auth/register",
                        "BENCH_TAG": f"{self.tag}x{self.counter}",
                        "BENCH_PASSWORD": c.PASSWORD,
                    }
                    m = c.wrk(server, "register.lua", threads=2, connections=8, seconds=t, env=env)
                    self.record(rnd, workers, scenario, app, m)
            elif scenario == "refresh":
                path = c.OUT / f"tokens-{workers}w-r{rnd}.txt"
                asyncio.run(c.load_refresh_tokens(self.db, ids, sv.refresh_tokens, path))
                env = {"BENCH_PATH": "/auth/refresh", "BENCH_TOKENS": str(path)}
                try:
                    m = c.wrk(ag, "refresh.lua", threads=2, connections=32, seconds=t, env=env)
                finally:
                    path.unlink(missing_ok=True)
                if m.requests >= sv.refresh_tokens:
                    print("  WARNING: refresh tokens ran out; raise --refresh-tokens")
                self.record(rnd, workers, scenario, "authgate", m)
                # authgate's own rotation statement straight on asyncpg, with as many
                # connections as authgate's pools may hold (15 a worker) under this load.
                conns = min(32, db_ceiling.POOL_SIZE * workers)
                m = db_ceiling.measure(
                    self.db, ids, connections=conns, seconds=t, tokens=sv.refresh_tokens
                )
                self.record(rnd, workers, scenario, "db-ceiling", m)
            elif scenario == "mixed":
                for app, server in (("authgate", ag), ("peer", peer)):
                    env = {
                        "BENCH_APP": app,
                        "BENCH_EMAIL": "mixed@bench.example.com",
                        "BENCH_PASSWORD": c.PASSWORD,
                    }
                    m = c.wrk(server, "mixed.lua", threads=8, connections=8, seconds=t, env=env)
                    m.extra["sessions_per_s"] = m.extra.get("sessions", 0) / m.seconds
                    self.record(rnd, workers, scenario, app, m)
            elif scenario == "overload":
                m = overload(ag, 4 * hash_rate, t)
                self.record(rnd, workers, scenario, "authgate", m)

    # --- the table -----------------------------------------------------------------------

    def summary(self) -> str:
        med: dict[tuple[str, int, str], dict[str, float]] = {}
        groups: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
        for r in self.records:
            groups[(r["scenario"], r["workers"], r["app"])].append(r)
        for key, rows in groups.items():
            med[key] = {
                k: statistics.median(float(r[k]) for r in rows)
                for k in ("rps", "p50_ms", "p99_ms", "errors", "rss_mb")
            }
            for k in ("share_503", "sessions_per_s", "offered_rate"):
                if k in rows[0]["extra"]:
                    med[key][k] = statistics.median(float(r["extra"][k]) for r in rows)
            med[key]["n"] = len(rows)
        hash_rate = statistics.median(self.hash_rates) if self.hash_rates else 0.0
        lines = [
            f"argon2id hash ceiling (m=19456 KiB, t=2, p=1, {c.nproc()} threads): "
            f"median {hash_rate:.1f} hashes/s over {len(self.hash_rates)} measurements",
            "",
            "| scenario | workers | app | req/s | p50 ms | p99 ms | errors | RSS/worker MB "
            "| ratio | n |",
            "|---|---|---|---:|---:|---:|---:|---:|---|---:|",
        ]
        order = {s: i for i, s in enumerate(ALL_SCENARIOS)}
        apps = {"authgate": 0, "mounted": 1, "peer": 2, "ceiling": 3, "db-ceiling": 4}
        for key in sorted(med, key=lambda k: (order[k[0]], k[1], apps[k[2]])):
            scenario, workers, app = key
            m = med[key]
            ratio = ""
            if app in ("authgate", "mounted"):
                parts = []
                peer = med.get((scenario, workers, "peer"))
                if peer and peer["rps"] and app == "authgate":
                    parts.append(f"{m['rps'] / peer['rps']:.2f}x peer")
                ceil = med.get((scenario, workers, "ceiling"))
                if ceil and ceil["rps"]:
                    parts.append(f"{100 * m['rps'] / ceil['rps']:.0f}% of JWT ceiling")
                dbc = med.get((scenario, workers, "db-ceiling"))
                if dbc and dbc["rps"]:
                    parts.append(f"{100 * m['rps'] / dbc['rps']:.0f}% of DB ceiling")
                if scenario in ("login", "register", "overload") and hash_rate:
                    parts.append(f"{100 * m['rps'] / hash_rate:.0f}% of hash ceiling")
                if "share_503" in m:
                    parts.append(f"503 share {100 * m['share_503']:.0f}%")
                    parts.append(f"offered {m['offered_rate']:.0f}/s")
                ratio = ", ".join(parts)
            if "sessions_per_s" in m:
                ratio = (ratio + ", " if ratio else "") + f"{m['sessions_per_s']:.1f} sessions/s"
            lines.append(
                f"| {scenario} | {workers} | {app} | {m['rps']:,.1f} | {m['p50_ms']:.1f} "
                f"| {m['p99_ms']:.1f} | {m['errors']:.0f} | {m['rss_mb']:.0f} | {ratio} "
                f"| {m['n']:.0f} |"
            )
        if self.checks:
            lines += [
                "",
                "Revocation with a warm state cache (20 GET /me after each, per worker "
                "count): "
                + "; ".join(
                    f"{ck['workers']}w logout {ck['logout']['after_401']}/20 401, "
                    f"deactivate {ck['deactivate']['after_401']}/20 401"
                    for ck in self.checks
                ),
            ]
        lines += ["", *self.targets()]
        if self.feature_records:
            lines += ["", *features.table(self.feature_records)]
        return "\n".join(lines)

    # --- targets (issue 16): medians of per-round ratios ----------------------------------

    def _per_round(self, workers: int, scenario: str, app: str, base: str) -> list[float]:
        """app/base rps of each round where both were measured."""
        by: dict[tuple[int, str], float] = {}
        for r in self.records:
            if r["workers"] == workers and r["scenario"] == scenario:
                by[(r["round"], r["app"])] = r["rps"]
        out = []
        for (rnd, name), rps in sorted(by.items()):
            if name != app:
                continue
            if base == "hash":
                ref = self.hash_rates[self._hash_index(workers, rnd)]
            else:
                ref = by.get((rnd, base), 0.0)
            if ref:
                out.append(rps / ref)
        return out

    def _hash_index(self, workers: int, rnd: int) -> int:
        """The hash ceiling measured before round `rnd` of the phase with `workers`."""
        return self.s.workers.index(workers) * self.s.rounds + rnd - 1

    def targets(self) -> list[str]:
        lines = [
            "Targets (issue 16; medians of per-round ratios, everything on at its defaults):",
            "",
            "| target | workers | measured | goal | met |",
            "|---|---|---:|---:|---|",
        ]

        def row(name: str, workers: int, values: list[float], goal: float) -> None:
            if not values:
                return
            got = statistics.median(values)
            lines.append(
                f"| {name} | {workers} | {100 * got:.1f} % | ≥ {100 * goal:.0f} % "
                f"| {'yes' if got >= goal else 'NO'} |"
            )

        for w in self.s.workers:
            row("GET /me / JWT ceiling", w, self._per_round(w, "me", "authgate", "ceiling"), 0.9)
            row(
                "mounted CurrentUser route / JWT ceiling",
                w,
                self._per_round(w, "me", "mounted", "ceiling"),
                0.9,
            )
            row(
                "refresh / DB ceiling",
                w,
                self._per_round(w, "refresh", "authgate", "db-ceiling"),
                0.75,
            )
            row("login / hash ceiling", w, self._per_round(w, "login", "authgate", "hash"), 0.85)
            row(
                "register / hash ceiling",
                w,
                self._per_round(w, "register", "authgate", "hash"),
                0.85,
            )
        for w in self.s.workers:
            rates = [
                r["rps"]
                for r in self.records
                if r["workers"] == w and r["scenario"] == "refresh" and r["app"] == "authgate"
            ]
            if rates:
                lines.append(
                    f"| refresh rotations/s (authgate) | {w} | {statistics.median(rates):,.0f} "
                    "| | |"
                )
        rss = [r["rss_mb"] for r in self.records if r["app"] == "authgate" and r["rss_mb"] > 0]
        if rss:
            peak = max(rss)
            lines.append(
                f"| RSS per worker, largest seen (MB) | all | {peak:.0f} | < 150 "
                f"| {'yes' if peak < 150 else 'NO'} |"
            )
        for ck in self.checks:
            ok = ck["ok"]
            lines.append(
                f"| revocation reaches GET /me at once (20/20) | {ck['workers']} "
                f"| {ck['logout']['after_401']}/20, {ck['deactivate']['after_401']}/20 "
                f"| 20/20 | {'yes' if ok else 'NO'} |"
            )
        return lines


def machine() -> str:
    cpu = "unknown"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as fh:
        mem_kb = int(fh.readline().split()[1])
    pkgs = [
        "authgate", "fastapi", "starlette", "uvicorn", "uvloop", "httptools", "sqlalchemy",
        "asyncpg", "redis", "argon2-cffi", "pyjwt", "pydantic", "fastapi-users",
        "fastapi-users-db-sqlalchemy", "pwdlib",
    ]  # fmt: skip
    versions = ", ".join(f"{p} {version(p)}" for p in pkgs)
    wrk_v = subprocess.run(["wrk", "--version"], capture_output=True, text=True, check=False)
    pg = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc", "show server_version"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    redis_v = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                             check=False)  # fmt: skip
    wrk_line = (wrk_v.stdout or wrk_v.stderr or "wrk ?").splitlines()[0]
    return (
        f"nproc {c.nproc()}; CPU {cpu}; memory {mem_kb / 1024 / 1024:.1f} GiB; "
        f"{platform.system()} {platform.release()}; Python {platform.python_version()}; "
        f"PostgreSQL {pg.stdout.strip() or '?'}; {redis_v.stdout.strip()[:40] or 'redis ?'}; "
        f"{wrk_line}\n"
        f"packages: {versions}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="1 round of 3 s runs: to try things out")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--seconds", type=float, default=None, help="length of one measurement")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--scenarios", default=",".join(ALL_SCENARIOS))
    p.add_argument("--refresh-tokens", type=int, default=None)
    p.add_argument(
        "--profile",
        metavar="SCENARIOS",
        help="instead of the comparison: py-spy profiles of authgate (1 worker) under these "
        "scenarios (me, login, refresh, register) into bench/profiles/",
    )
    p.add_argument(
        "--no-features",
        action="store_true",
        help="skip the phase that measures each round-2 feature off and on (bench/features.py)",
    )
    p.add_argument(
        "--features-only",
        action="store_true",
        help="only the phase that measures each round-2 feature off and on",
    )
    args = p.parse_args()
    c.require_wrk()
    quick = args.quick
    settings = Settings(
        rounds=args.rounds or (1 if quick else 3),
        seconds=args.seconds or (3 if quick else 8),
        hash_seconds=2 if quick else 4,
        workers=[int(w) for w in args.workers.split(",")],
        refresh_tokens=args.refresh_tokens or (15_000 if quick else 40_000),
        scenarios=[s for s in args.scenarios.split(",") if s],
    )
    unknown = set(settings.scenarios) - set(ALL_SCENARIOS)
    if unknown:
        sys.exit(f"unknown scenarios: {', '.join(sorted(unknown))}")
    c.OUT.mkdir(exist_ok=True)
    started = time.time()
    print(machine(), flush=True)
    db = asyncio.run(c.fresh_database("authgate_bench"))
    peer_db = asyncio.run(c.fresh_database("authgate_bench_peer"))
    c.clear_redis_prefix("authgate-bench:")
    peer_sa = peer_db.replace("postgresql://", "postgresql+asyncpg://")
    bench = Bench(settings, db, peer_sa)
    if args.profile:
        run_profiles(bench, args.profile.split(","), settings.seconds)
        return
    try:
        for workers in settings.workers:
            if args.features_only:
                break
            bench.phase(workers)
        if args.features_only:
            bench.prepare_features()
        if not args.no_features:
            features.run(bench, settings.rounds, settings.seconds, settings.refresh_tokens)
    finally:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        summary = bench.summary()
        data = {
            "machine": machine(),
            "command": " ".join(["bench/run", *sys.argv[1:]]),
            "settings": asdict(settings),
            "hash_rates": bench.hash_rates,
            "records": bench.records,
            "checks": bench.checks,
            "features": bench.feature_records,
            "summary": summary,
            "seconds": time.time() - started,
        }
        (c.OUT / f"results-{stamp}.json").write_text(json.dumps(data, indent=1, default=str))
        (c.OUT / "last-summary.md").write_text(summary + "\n")
        print()
        print(summary)
        print(f"\n(total {time.time() - started:.0f} s; raw data bench/out/results-{stamp}.json)")


def run_profiles(bench: Bench, scenarios: list[str], seconds: float) -> None:
    ag = c.start_authgate(bench.db, PORTS["authgate"], 1)
    try:
        c.authgate_register(ag.url, "login@bench.example.com")
        c.authgate_register(ag.url, "me@bench.example.com")
        token = c.authgate_login(ag.url, "me@bench.example.com")["access_token"]
        ids = asyncio.run(c.user_ids(bench.db, ["me@bench.example.com"]))
        login_json = json.dumps({"email": "login@bench.example.com", "password": c.PASSWORD})
        t = max(seconds, 12)
        for name in scenarios:
            env: dict[str, str]
            if name == "me":
                env = {"BENCH_PATH": "/auth/me", "BENCH_TOKEN": token}
                script, conns = "get.lua", 32
            elif name == "login":
                env = {"BENCH_PATH": "/auth/login", "BENCH_BODY": login_json}
                env["BENCH_CTYPE"] = "application/json"
                script, conns = "post.lua", 8
            elif name == "register":
                env = {"BENCH_PATH": "/auth/register", "BENCH_TAG": f"p{bench.tag}"}
                env["BENCH_PASSWORD"] = c.PASSWORD
                script, conns = "register.lua", 8
            elif name == "refresh":
                path = c.OUT / "tokens-profile.txt"
                asyncio.run(c.load_refresh_tokens(bench.db, ids, 60_000, path))
                env = {"BENCH_PATH": "/auth/refresh", "BENCH_TOKENS": str(path)}
                script, conns = "refresh.lua", 32
            elif name == "overload":
                rate = 4 * hash_ceiling(2)
                profile(ag, f"{name}-1w", t - 2, lambda rate=rate: overload(ag, rate, t))
                continue
            else:
                sys.exit(f"no profile for {name}")

            def run(script: str = script, conns: int = conns, env: dict[str, str] = env) -> Any:
                return c.wrk(ag, script, threads=2, connections=conns, seconds=t, env=env)

            profile(ag, f"{name}-1w", t - 2, run)
            if name == "refresh":
                path.unlink(missing_ok=True)
    finally:
        c.stop(ag)


if __name__ == "__main__":
    os.chdir(c.ROOT)
    threading.current_thread().name = "bench"
    main()
