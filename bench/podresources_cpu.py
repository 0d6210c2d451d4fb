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
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from ingest import (
    ServerCpu,
    free_port,
    new_postgres_database,
    run_phase,
    start_service,
    stop_service,
)
from scale import MIG, Fleet

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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", default="devicedeck_podres_cpu")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batch", type=int, default=200, help="new nodes a round")
    parser.add_argument("--moved", type=int, default=4, help="inference pods moved a change")
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()

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
