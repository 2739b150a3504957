"""Where the elicit round trip goes: the same daphne measurement with one cost removed at a time.

Variants (see bench/variant_asgi.py): the database on disk (the baseline), on tmpfs (no fsync),
PostgreSQL; then, on the disk SQLite, without the per-message ``close_old_connections`` hop,
without phase saves, without the recorder's status/journal writes, and without all three.
The last rows estimate what taking persistence off the critical path would give.

    .venv/bin/python bench/diagnose.py [--iterations 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BenchSite, append_results, free_port, stop, summary_ms, table  # noqa: E402
from bench.elicit_roundtrip import loop_ask, seat_step  # noqa: E402

PG = "postgres://postgres@127.0.0.1:5432/"


def pg_database() -> tuple[str, str] | None:
    try:
        import psycopg

        name = f"chatbridge_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG + "postgres", autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name, PG + name
    except Exception as exc:  # no PostgreSQL: skip that row
        print(f"PostgreSQL unavailable: {exc!r}")
        return None


def drop_pg(name: str) -> None:
    import psycopg

    with psycopg.connect(PG + "postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def measure(site: BenchSite, variant: str, iterations: int, bookings: int) -> list[float]:
    port = free_port()
    proc = site.start(
        "daphne", port, app="bench.variant_asgi:application", env={"BENCH_VARIANT": variant}
    )
    try:
        base = f"http://127.0.0.1:{port}"
        rt, _, _ = await loop_ask(base, 30, iterations)
        seat, _ = await seat_step(base, 3, bookings)
    finally:
        stop(proc)
    a, b = summary_ms(rt), summary_ms(seat)
    return [a["p50"], a["p99"], b["p50"], b["p99"]]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--bookings", type=int, default=20)
    args = parser.parse_args()
    it, bk = args.iterations, args.bookings
    rows = []
    disk = BenchSite()
    rows.append(["SQLite file on disk (baseline)", *await measure(disk, "", it, bk)])
    rows.append(
        ["SQLite on tmpfs (no fsync)", *await measure(BenchSite(db_dir="/dev/shm"), "", it, bk)]
    )
    pg = pg_database()
    if pg is not None:
        try:
            rows.append(
                ["PostgreSQL 127.0.0.1", *await measure(BenchSite(db_url=pg[1]), "", it, bk)]
            )
        finally:
            drop_pg(pg[0])
    for variant, label in [
        ("noclose", "disk, − close_old_connections hop per consumer message"),
        ("nophase", "disk, − save_phase writes"),
        ("norecord", "disk, − recorder status/requested/recorded writes"),
        ("noclose,nophase,norecord", "disk, − all three (persistence off the path)"),
    ]:
        rows.append([label, *await measure(disk, variant, it, bk)])
    body = "\n".join(
        [
            f"daphne, one chat; loop_ask {it} round trips after 30 warm-up, seat step over {bk} "
            "bookings. Variants patch the server process only (bench/variant_asgi.py).",
            "",
            table(["variant", "one-field p50 ms", "p99 ms", "seat step p50 ms", "p99 ms"], rows),
        ]
    )
    append_results("Diagnosis: what the elicit round trip costs", body)


if __name__ == "__main__":
    asyncio.run(main())
