"""What each feature of round 2 costs GET /me and refresh (issue 16: at most 3 % each).

One worker. Each round starts authgate once per variant (everything on; the audit log off;
metrics off; rate limits off), alternating, and measures GET /me and refresh on each; then
runs the database ceiling (`db_ceiling.py`) with authgate's rotation statement whole, without
the session's last use ("session activity") and without the per-session refresh limit. Those
two live entirely inside the rotation statement, so the statement with and without them is
exactly what they cost the database; `AUTHGATE_RATE_LIMITS=off` keeps the statement as it is
(an unreachable budget) and removes the Redis checks of the other limits.

A feature's cost is 1 - (rate with everything on) / (rate with that feature off), the median
of the per-round ratios. This machine's run-to-run noise is several per cent (the same
variant twice in a row differs by up to 10 %), so a cost under that is not resolved by one
run; `bench/run --features-only --rounds 6` narrows it.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import TYPE_CHECKING, Any

import common as c
import db_ceiling

if TYPE_CHECKING:
    from harness import Bench

#: Variant name -> the environment that switches one feature off (or nothing: all on).
VARIANTS: dict[str, dict[str, str]] = {
    "all on": {},
    "audit log off": {"AUTHGATE_AUDIT_RETENTION_DAYS": "0"},
    "metrics off": {"AUTHGATE_METRICS": "off"},
    "rate limits off": {"AUTHGATE_RATE_LIMITS": "off"},
}
PORT = 18005


def run(bench: Bench, rounds: int, seconds: float, tokens: int) -> None:
    print("== features: each of round 2's features off and on (1 worker)", flush=True)
    ids = asyncio.run(c.user_ids(bench.db, ["me@bench.example.com"]))
    names = list(VARIANTS)
    for rnd in range(1, rounds + 1):
        # Each round starts with another variant: no variant is always measured first (after
        # the previous round's database ceiling, when PostgreSQL may still be writing).
        shift = (rnd - 1) % len(names)
        for variant in names[shift:] + names[:shift]:
            env = VARIANTS[variant]
            ag = c.start_authgate(bench.db, PORT, 1, **env)
            try:
                token = c.authgate_login(ag.url, "me@bench.example.com")["access_token"]
                me = {"BENCH_PATH": "/auth/me", "BENCH_TOKEN": token}
                m = c.wrk(ag, "get.lua", threads=2, connections=32, seconds=seconds, env=me)
                _record(bench, rnd, variant, "me", m)
                path = c.OUT / f"tokens-features-r{rnd}.txt"
                asyncio.run(c.load_refresh_tokens(bench.db, ids, tokens, path))
                env_r = {"BENCH_PATH": "/auth/refresh", "BENCH_TOKENS": str(path)}
                try:
                    m = c.wrk(
                        ag, "refresh.lua", threads=2, connections=32, seconds=seconds, env=env_r
                    )
                finally:
                    path.unlink(missing_ok=True)
                _record(bench, rnd, variant, "refresh", m)
            finally:
                c.stop(ag)
        for variant in db_ceiling.VARIANTS:
            m = db_ceiling.measure(
                bench.db,
                ids,
                connections=db_ceiling.POOL_SIZE,
                seconds=seconds,
                tokens=tokens,
                variant=variant,
            )
            _record(bench, rnd, f"statement {variant}", "db-ceiling", m)


def _record(bench: Bench, rnd: int, variant: str, scenario: str, m: c.Measurement) -> None:
    bench.feature_records.append(
        {"round": rnd, "variant": variant, "scenario": scenario, "rps": m.rps, "rss_mb": m.rss_mb}
    )
    print(
        f"  r{rnd} features {variant:28} {scenario:10} {m.rps:9,.1f} req/s  errors {m.errors}"
        f"  rss {m.rss_mb:5.1f} MB",
        flush=True,
    )


def _cost(records: list[dict[str, Any]], scenario: str, on: str, off: str) -> float | None:
    """1 - on/off, the median of the per-round ratios."""
    rates = {(r["round"], r["variant"]): r["rps"] for r in records if r["scenario"] == scenario}
    ratios = [
        rates[(rnd, on)] / rates[(rnd, off)]
        for rnd, variant in rates
        if variant == off and (rnd, on) in rates and rates[(rnd, off)]
    ]
    return 1 - statistics.median(ratios) if ratios else None


def table(records: list[dict[str, Any]]) -> list[str]:
    """The feature table for RESULTS.md (target: no feature costs more than 3 %)."""
    lines = [
        "What each round-2 feature costs (1 worker; 1 - on/off, median of per-round ratios; "
        "target ≤ 3 %; a negative cost is noise):",
        "",
        "| feature | GET /me | refresh | refresh, statement on the DB ceiling |",
        "|---|---:|---:|---:|",
    ]

    def fmt(value: float | None) -> str:
        if value is None:
            return "n/a"
        return f"{100 * value:+.1f} %" + (" (over 3 %)" if value > 0.03 else "")

    for name, off in (
        ("audit log", "audit log off"),
        ("metrics", "metrics off"),
        ("rate limits (Redis checks)", "rate limits off"),
    ):
        me = _cost(records, "me", "all on", off)
        refresh = _cost(records, "refresh", "all on", off)
        lines.append(f"| {name} | {fmt(me)} | {fmt(refresh)} | — |")
    for name, variant in (
        ("session activity (last use, address, agent)", "no-activity"),
        ("per-session refresh limit", "no-budget"),
    ):
        db = _cost(records, "db-ceiling", "statement full", f"statement {variant}")
        lines.append(f"| {name} | not on the path | — | {fmt(db)} |")
    return lines
