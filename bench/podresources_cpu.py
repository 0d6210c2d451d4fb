"""Service CPU per PodResources snapshot on PostgreSQL: a new node's, and a changed one's.

Starts `devicedeck serve` (one worker, auth on) from this checkout on a new PostgreSQL
database, then, for ROUNDS batches of BATCH new nodes of bench/scale.py's device mix:

1. each node's 56-slice ListAndWatch snapshot (not timed);
2. each node's first PodResources snapshot (timed: "new"), as bench/scale.py's wrk phase sends
   it: 30 pods holding 32 devices, the 8 GPUs not yet known, an allocatable list of all 64;
3. each node's next PodResources snapshot with MOVED inference pods on other slices (timed:
   "changed"): as many allocations end as start.

After the first round (a warm-up, left out of the medians) the database is analysed. It prints
the service's CPU time per snapshot of each kind (from /proc, which waiting for a
core does not count) and the wall rate. Run it from each checkout to compare, alternating:

    .venv/bin/python bench/podresources_cpu.py --database devicedeck_podres_cpu

With --other it compares code against code instead, as bench/listandwatch_cpu.py does: two
processes, one running this checkout's app, the other another checkout's, call the ASGI app
directly, one request at a time, taking turns a block each (bench/turns.py). A block is
BLOCK new nodes: their ListAndWatch snapshots, their first PodResources snapshots, and their
changed ones, each kind timed apart; it prints the median CPU per snapshot of each kind and
the median ratio this/other.

    .venv/bin/python bench/podresources_cpu.py --other /tmp/before --blocks 12
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from ingest import (
    ServerCpu,
    free_port,
    migrate_and_create_token,
    new_postgres_database,
    run_phase,
    start_service,
    stop_service,
)
from scale import MIG, Fleet
from turns import medians, take_turns
from unchanged_cpu import post

ROOT = Path(__file__).resolve().parents[1]
BLOCK = 50
KINDS = ("listandwatch new node", "podresources new node", "podresources changed")

Request = tuple[str, str, dict[str, Any] | None]


def moved(fleet: Fleet, snapshot: dict[str, Any], n: int, count: int) -> dict[str, Any]:
    """The snapshot with its first `count` inference pods on the slices no pod holds."""
    free = fleet.slice_ids(n)[fleet.slices // 2 :]
    changed = {**snapshot, "podResources": [dict(pod) for pod in snapshot["podResources"]]}
    inference = [pod for pod in changed["podResources"] if pod["name"].startswith("infer-")]
    for pod, device_id in zip(inference[:count], free, strict=False):
        pod["containers"] = [
            {"name": "main", "devices": [{"resourceName": MIG, "deviceIds": [device_id]}]}
        ]
    return changed


async def timed(
    port: int, token: str, requests: list[Request], concurrency: int, server: ServerCpu
) -> tuple[float, float]:
    """CPU ms per request, requests per second."""
    cpu = server.seconds()
    elapsed, _ = await run_phase(port, token, requests, concurrency)
    return (server.seconds() - cpu) / len(requests) * 1000, len(requests) / elapsed


async def bench(
    url: str,
    port: int,
    token: str,
    server: ServerCpu,
    rounds: int,
    batch: int,
    moves: int,
    concurrency: int,
) -> None:
    fleet = Fleet(8, 56)
    new_cpu: list[float] = []
    changed_cpu: list[float] = []
    for r in range(rounds):
        numbers = range(r * batch, (r + 1) * batch)
        names = {n: f"podres-node-{n:06d}" for n in numbers}
        plugins: list[Request] = [
            ("POST", "/api/v1/ingest/listandwatch", fleet.listandwatch(names[n], n, MIG, 1))
            for n in numbers
        ]
        await run_phase(port, token, plugins, concurrency)
        first = {n: fleet.podresources(names[n], n, 1) for n in numbers}
        new: list[Request] = [("POST", "/api/v1/ingest/podresources", first[n]) for n in numbers]
        cpu, rate = await timed(port, token, new, concurrency, server)
        new_cpu.append(cpu)
        changed: list[Request] = [
            (
                "POST",
                "/api/v1/ingest/podresources",
                moved(fleet, fleet.podresources(names[n], n, 2), n, moves),
            )
            for n in numbers
        ]
        cpu2, rate2 = await timed(port, token, changed, concurrency, server)
        changed_cpu.append(cpu2)
        print(
            f"round {r + 1}: new {cpu:6.2f} ms CPU, {rate:6.1f}/s   "
            f"changed ({moves} pods moved) {cpu2:6.2f} ms CPU, {rate2:6.1f}/s",
            flush=True,
        )
        if r == 0:
            # Statistics, as autovacuum gives a service that has run a while (bench/scale.py
            # does the same after its fill).
            with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
    # The first round warms the process up.
    steady_new, steady_changed = new_cpu[1:] or new_cpu, changed_cpu[1:] or changed_cpu
    print(
        f"median service CPU per snapshot: new {statistics.median(steady_new):.2f} ms, "
        f"changed {statistics.median(steady_changed):.2f} ms"
    )


async def serve_blocks(database: str, moves: int) -> None:
    """Child: set up, print "ready", then run one block per line read from stdin and print the
    CPU milliseconds per snapshot of each kind; an empty line ends it."""
    # The app comes from the checkout this child runs in, which may not be this one.
    sys.path.insert(0, str(Path.cwd()))
    from devicedeck.config import Settings
    from devicedeck.main import create_app

    url = new_postgres_database(database)
    token = migrate_and_create_token({**os.environ, "DEVICEDECK_DATABASE_URL": url}, Path.cwd())
    os.environ["DEVICEDECK_LOG_LEVEL"] = "WARNING"
    app = create_app(Settings(database_url=url))
    fleet = Fleet(8, 56)
    fresh = 0

    async def timed(bodies: list[bytes], path: str) -> str:
        started = time.process_time()
        for body in bodies:
            if b'"changed":true' not in await post(app, body, token, path):
                raise SystemExit("a changed snapshot was answered unchanged")
        return f"{(time.process_time() - started) / len(bodies) * 1000:.4f}"

    async def block() -> str:
        nonlocal fresh
        numbers = range(fresh, fresh + BLOCK)
        fresh += BLOCK
        names = {n: f"podres-node-{n:06d}" for n in numbers}
        kinds = (
            ("/api/v1/ingest/listandwatch", lambda n: fleet.listandwatch(names[n], n, MIG, 1)),
            ("/api/v1/ingest/podresources", lambda n: fleet.podresources(names[n], n, 1)),
            (
                "/api/v1/ingest/podresources",
                lambda n: moved(fleet, fleet.podresources(names[n], n, 2), n, moves),
            ),
        )
        figures = []
        for path, snapshot in kinds:
            bodies = [json.dumps(snapshot(n)).encode() for n in numbers]
            figures.append(await timed(bodies, path))
        return " ".join(figures)

    async with app.router.lifespan_context(app):
        for _ in range(2):  # warm-up
            await block()
        loop = asyncio.get_running_loop()
        print("ready", flush=True)
        while (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            print(await block(), flush=True)


def compare(other: Path, blocks: int, moves: int, prefix: str) -> None:
    databases = (f"{prefix}_this", f"{prefix}_other")
    these, those = take_turns(__file__, (ROOT, other), databases, ["--moved", str(moves)], blocks)
    print(f"{blocks} blocks of {BLOCK} new nodes, one request at a time, in turns")
    for k, kind in enumerate(KINDS):
        mine, theirs, ratio = medians(these, those, k)
        print(
            f"{kind:<22} CPU ms/snapshot: this {mine:7.3f}  other {theirs:7.3f}  "
            f"median ratio this/other {ratio:.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", default="devicedeck_podres_cpu")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batch", type=int, default=200, help="new nodes a round")
    parser.add_argument("--moved", type=int, default=4, help="inference pods moved a change")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--other", type=Path, help="another checkout to compare with")
    parser.add_argument("--blocks", type=int, default=12, help="blocks of each, with --other")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(serve_blocks(args.child, args.moved))
        return
    if args.other:
        compare(args.other.resolve(), args.blocks, args.moved, args.database)
        return

    workdir = Path(tempfile.mkdtemp(prefix="devicedeck-podres-"))
    os.environ["DEVICEDECK_STALE_AFTER"] = "86400"
    port = free_port()
    url = new_postgres_database(args.database)
    process, token = start_service(url, port, workdir)
    print(f"service pid {process.pid}", flush=True)
    try:
        started = time.perf_counter()
        asyncio.run(
            bench(
                url,
                port,
                token,
                ServerCpu(process.pid),
                args.rounds,
                args.batch,
                args.moved,
                args.concurrency,
            )
        )
        print(f"took {time.perf_counter() - started:.0f} s")
    finally:
        stop_service(process, workdir)


if __name__ == "__main__":
    main()
