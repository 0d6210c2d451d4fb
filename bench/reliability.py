"""The reliability ranking at fleet scale, against the device list in the same run.

Starts `devicedeck serve` (one uvicorn worker, auth on) on a new PostgreSQL database (or
SQLite), fills the fleet of bench/scale.py through POST /api/v1/ingest/* (by default 5,000 nodes
of 8 GPUs and 56 MIG slices: 320,000 devices, pods holding half), then writes a history, also
through the ingest API:

- every FLAP_EVERY-th node (`--flap-every`, 8: 625 nodes, 5,000 GPUs) has all its GPUs fail
  and recover `--rounds` times (6: 30,000 spells of Unhealthy), and between the failure and the
  recovery of each round its trainer pods are replaced by new ones, so each failing GPU was
  held by several pods and each round's pods were hit.

The service stamps every change with its own clock, and nothing lets a client set it, so the
history is written in minutes, not over a month. What the ranking costs depends on the spells
and holds that fall in its window, not on how long the window is: every spell written here is
inside the 30-day window, as many as a month in which one GPU in 64 failed six times would give
(a 30-day window over a real month holds the same rows).

Then it times, as p50 and p95 of RUNS sequential requests on one keep-alive connection, the
ranking (JSON and page) beside the first page of the device list and the /devices page, and
prints each as a ratio to those: the machines this runs on are shared, and only ratios from the
same minutes compare.

    .venv/bin/python bench/reliability.py --nodes 625      # 40,000 devices, 80 nodes flapping
    .venv/bin/python bench/reliability.py --nodes 5000     # 320,000 devices
    .venv/bin/python bench/reliability.py --nodes 5000 --reuse   # time the same data again
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
    Connection,
    free_port,
    new_postgres_database,
    run_phase,
    start_service,
    stop_service,
)
from scale import GPU, Fleet, fill, get_json, node_name, percentile, time_get


def flapping_nodes(nodes: int, every: int) -> list[int]:
    return list(range(0, nodes, every))


def failing(fleet: Fleet, n: int, seq: int, health: str) -> tuple[str, str, dict[str, Any]]:
    snapshot = fleet.listandwatch(node_name(n), n, GPU, seq)
    for device in snapshot["devices"]:
        device["health"] = health
    return ("POST", "/api/v1/ingest/listandwatch", snapshot)


def new_pods(fleet: Fleet, n: int, seq: int, round_: int) -> tuple[str, str, dict[str, Any]]:
    """The node's pods, the trainers replaced by new ones (a new name each round)."""
    snapshot = fleet.podresources(node_name(n), n, seq)
    for pod in snapshot["podResources"]:
        if pod["name"].startswith("trainer-"):
            pod["name"] += f"-r{round_}"
    return ("POST", "/api/v1/ingest/podresources", snapshot)


async def history(
    port: int, token: str, fleet: Fleet, flappers: list[int], rounds: int, concurrency: int
) -> None:
    """Each round: every flapping node's GPUs fail, its trainers are replaced, they recover.
    One phase at a time, so each node's snapshots arrive in their order."""
    started = time.perf_counter()
    sent = 0
    for round_ in range(1, rounds + 1):
        phases = [
            [failing(fleet, n, 2 * round_, "Unhealthy") for n in flappers],
            [new_pods(fleet, n, round_ + 1, round_) for n in flappers],
            [failing(fleet, n, 2 * round_ + 1, "Healthy") for n in flappers],
        ]
        for requests in phases:
            await run_phase(port, token, requests, concurrency)
            sent += len(requests)
        rate = sent / (time.perf_counter() - started)
        print(f"  history round {round_}/{rounds}, {rate:.1f} snapshots/s", flush=True)


def targets(nodes: int) -> dict[str, str]:
    prefix = node_name(nodes // 2)[:-2]
    return {
        # The baselines: today's lists.
        "devices first page (baseline)": "/api/v1/devices?limit=50",
        "devices sort=health": "/api/v1/devices?sort=health",
        "reliability devices 30d": "/api/v1/reliability/devices?window=30d",
        "reliability devices 7d": "/api/v1/reliability/devices?window=7d",
        "reliability devices sort=-unhealthy_seconds": (
            "/api/v1/reliability/devices?window=30d&sort=-unhealthy_seconds"
        ),
        "reliability devices sort=-pods_hit": (
            "/api/v1/reliability/devices?window=30d&sort=-pods_hit"
        ),
        "reliability devices node_prefix=": (
            f"/api/v1/reliability/devices?window=30d&node_prefix={prefix}"
        ),
        "reliability devices namespace=": (
            "/api/v1/reliability/devices?window=30d&namespace=team-07"
        ),
        "reliability nodes": "/api/v1/reliability/nodes?window=30d",
        "reliability resources": "/api/v1/reliability/resources?window=30d",
        "page /devices (baseline)": "/devices",
        "page /reliability": "/reliability?window=30d",
        "/livez": "/livez",
    }


async def deep_page(port: int, token: str) -> str:
    """The ranking's `next` after 5 pages of 500."""
    connection = await Connection.open(port)
    path = "/api/v1/reliability/devices?window=30d&limit=500"
    try:
        for _ in range(5):
            found = await get_json(connection, token, path)
            if not found["next"]:
                break
            path = found["next"]
    finally:
        connection.close()
    return path


async def time_all(port: int, token: str, paths: dict[str, str], runs: int) -> dict[str, Any]:
    connection = await Connection.open(port)
    try:
        found = await get_json(connection, token, paths["reliability devices 30d"])
        print(
            f"ranking: {found['count']:,} devices had a spell in 30 d; "
            f"worst: {found['results'][0]['failures']} failures"
        )
        timings = {}
        for label, path in paths.items():
            timings[label] = await time_get(connection, token, path, runs)
    finally:
        connection.close()
    return timings


def report(timings: dict[str, list[float]]) -> None:
    api = statistics.median(timings["devices first page (baseline)"])
    page = statistics.median(timings["page /devices (baseline)"])
    print(f"{'query':48} {'p50 ms':>9} {'p95 ms':>9} {'x list':>7}")
    for label, values in timings.items():
        p50 = statistics.median(values)
        base = page if label.startswith("page ") else api
        print(f"{label:48} {p50:9.1f} {percentile(values, 0.95):9.1f} {p50 / base:7.2f}")
    print("x list: p50 over the p50 of the device list's first page (pages: of page /devices)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--nodes", type=int, default=625)
    parser.add_argument("--gpus", type=int, default=8, help="GPU devices per node")
    parser.add_argument("--slices", type=int, default=56, help="MIG slice devices per node")
    parser.add_argument("--flap-every", type=int, default=8, help="every Nth node's GPUs flap")
    parser.add_argument("--rounds", type=int, default=6, help="failures of each flapping GPU")
    parser.add_argument("--runs", type=int, default=25, help="timed requests per query")
    parser.add_argument("--concurrency", type=int, default=8, help="connections while filling")
    parser.add_argument("--database", default="devicedeck_reliability")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="time the fleet and history the last PostgreSQL run left in --database",
    )
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="devicedeck-reliability-"))
    port = free_port()
    if args.db == "sqlite":
        url = f"sqlite:///{workdir / 'bench.db'}"
    elif args.reuse:
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{args.database}"
    else:
        url = new_postgres_database(args.database)
    # The fill takes minutes: nodes must not turn stale (and be swept) while it runs.
    os.environ["DEVICEDECK_STALE_AFTER"] = "86400"
    process, token = start_service(url, port, workdir)
    fleet = Fleet(args.gpus, args.slices)
    flappers = flapping_nodes(args.nodes, args.flap_every)
    print(
        f"database={args.db} nodes={args.nodes:,} "
        f"devices={args.nodes * (args.gpus + args.slices):,} flapping GPUs="
        f"{len(flappers) * args.gpus:,} x {args.rounds} failures runs={args.runs} "
        f"cpus={os.cpu_count()}",
        flush=True,
    )
    try:
        if not args.reuse:
            started = time.perf_counter()
            asyncio.run(fill(port, token, fleet, args.nodes, args.concurrency))
            print(f"fill took {time.perf_counter() - started:.0f} s")
            started = time.perf_counter()
            asyncio.run(history(port, token, fleet, flappers, args.rounds, args.concurrency))
            print(f"history took {time.perf_counter() - started:.0f} s")
        if args.db == "postgresql":
            # Statistics and visibility maps, as autovacuum gives a service that has run a while.
            with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
        paths = targets(args.nodes)
        paths["reliability devices deep page (5 x next, 500)"] = asyncio.run(deep_page(port, token))
        report(asyncio.run(time_all(port, token, paths, args.runs)))
    finally:
        stop_service(process, workdir)


if __name__ == "__main__":
    main()
