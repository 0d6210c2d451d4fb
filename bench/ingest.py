"""Ingest throughput benchmark.

Starts `devicedeck serve` (one uvicorn worker) on SQLite or PostgreSQL, then simulates N nodes
(8 devices each, pods holding them) posting snapshots with concurrency C:

1. baseline: GET /livez, the same client and server doing the least work possible;
2. changed: PodResources snapshots whose pods differ from the node's previous snapshot;
3. unchanged: the same snapshots again with a higher seq.

Prints snapshots/s, p50/p99 latency, each rate as a ratio of the /livez rate measured in the
same run, because the machines this runs on are shared and noisy, and the service's CPU time
per request.

    .venv/bin/python bench/ingest.py --db postgresql --nodes 200 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
DEVICES_PER_NODE = 8
RESOURCE = "example.com/gpu"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def database_url(kind: str, workdir: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{workdir / 'bench.db'}"
    return new_postgres_database("devicedeck_bench")


def new_postgres_database(name: str) -> str:
    """An empty PostgreSQL database of that name (dropped first if it exists), as a URL."""
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def cli(checkout: Path) -> list[str]:
    """The command running `checkout`'s CLI with this virtualenv's Python, in cwd=checkout:
    `python -m` puts the working directory first on sys.path, so the checkout's package is
    imported, not the one installed. The package was called `app` before it was `devicedeck`."""
    for package in ("devicedeck", "app"):
        if (checkout / package / "cli.py").is_file():
            return [sys.executable, "-m", f"{package}.cli"]
    raise SystemExit(f"{checkout}: neither devicedeck/cli.py nor app/cli.py")


def migrate_and_create_token(env: dict[str, str], checkout: Path) -> str:
    """Migrates the database in env with the checkout's code; returns a new token with the
    ingest and read scopes."""
    command = cli(checkout)
    subprocess.run([*command, "migrate"], env=env, check=True, cwd=checkout, capture_output=True)
    made = subprocess.run(
        [
            *command,
            "token",
            "create",
            "--name",
            f"bench-{os.getpid()}-{time.monotonic_ns()}",
            "--scope",
            "ingest",
            "--scope",
            "read",
            "--all-nodes",
        ],
        env=env,
        check=True,
        cwd=checkout,
        capture_output=True,
        text=True,
    )
    return made.stdout.strip().splitlines()[-1]


def start_service(
    url: str, port: int, workdir: Path, checkout: Path = ROOT
) -> tuple[subprocess.Popen[bytes], str]:
    """`devicedeck serve` of `checkout`'s code (run with this virtualenv), once it answers."""
    env = {**os.environ, "DEVICEDECK_DATABASE_URL": url, "DEVICEDECK_LOG_LEVEL": "WARNING"}
    token = migrate_and_create_token(env, checkout)
    log = open(workdir / "service.log", "wb")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(
        [*cli(checkout), "serve", "--port", str(port), "--no-migrate"],
        env=env,
        cwd=checkout,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120  # a busy shared machine can take a minute
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1).status_code == 200:
                return process, token
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("service did not start; see service.log")


def stop_service(process: subprocess.Popen[bytes], workdir: Path) -> None:
    process.terminate()
    process.wait(timeout=30)
    shutil.rmtree(workdir, ignore_errors=True)


def now() -> str:
    return datetime.now(UTC).isoformat()


def plugin_snapshot(node: str, seq: int) -> dict[str, Any]:
    return {
        "node": node,
        "resource": RESOURCE,
        "source": {"boot_id": "bench", "seq": seq},
        "observed_at": now(),
        "devices": [
            {"ID": f"{node}-gpu{i}", "health": "Healthy", "topology": {"nodes": [{"ID": i // 4}]}}
            for i in range(DEVICES_PER_NODE)
        ],
    }


def pods_snapshot(node: str, seq: int, variant: int) -> dict[str, Any]:
    """Four pods with two devices each; each variant moves the pods to other devices."""
    pods = []
    for p in range(4):
        first = (p * 2 + variant) % DEVICES_PER_NODE
        ids = [f"{node}-gpu{first}", f"{node}-gpu{(first + 1) % DEVICES_PER_NODE}"]
        pods.append(
            {
                "name": f"job-{variant}-{p}",
                "namespace": "bench",
                "containers": [
                    {
                        "name": "main",
                        "devices": [
                            {
                                "resourceName": RESOURCE,
                                "deviceIds": [device_id],
                                "topology": {"nodes": [{"ID": str(int(device_id[-1]) // 4)}]},
                            }
                            for device_id in ids
                        ],
                    }
                ],
            }
        )
    return {
        "node": node,
        "source": {"boot_id": "bench", "seq": seq},
        "observed_at": now(),
        "podResources": pods,
    }


class Connection:
    """One keep-alive HTTP/1.1 connection that sends prepared requests and reads the answers.

    A full client (httpx) spends about a millisecond of CPU per request, on the same two cores
    as the service; this one sends bytes prepared before the clock starts and parses only the
    status line and Content-Length, so the service gets the machine.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        body = await self.reader.readexactly(length) if length else b""
        return status, body

    def close(self) -> None:
        self.writer.close()


Request = tuple[str, str, dict[str, Any] | None]


def prepare(request: Request, token: str) -> bytes:
    method, path, body = request
    data = json.dumps(body).encode() if body is not None else b""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


async def run_phase(
    port: int, token: str, requests: list[Request], concurrency: int
) -> tuple[float, list[float]]:
    """Send the requests with `concurrency` connections. Requests for one node always go to
    the same connection, in order, as one agent sends them: a node's stream never has two
    snapshots in flight, so none is refused as older than one that overtook it."""
    lanes: list[list[bytes]] = [[] for _ in range(concurrency)]
    for index, item in enumerate(requests):
        body = item[2]
        key = str(body["node"]) if body else str(index)
        lanes[zlib.crc32(key.encode()) % concurrency].append(prepare(item, token))
    connections = [await Connection.open(port) for _ in range(concurrency)]
    latencies: list[float] = []

    async def worker(connection: Connection, lane: list[bytes]) -> None:
        for request in lane:
            started = time.perf_counter()
            status, body = await connection.send(request)
            latencies.append(time.perf_counter() - started)
            if status != 200:
                raise SystemExit(f"{request.split(b' ', 2)[:2]} answered {status}: {body!r}")

    try:
        started = time.perf_counter()
        await asyncio.gather(*(worker(c, lane) for c, lane in zip(connections, lanes, strict=True)))
        return time.perf_counter() - started, latencies
    finally:
        for connection in connections:
            connection.close()


class ServerCpu:
    """CPU time the service process has used, from /proc (Linux): per request it is steadier
    than a rate on a shared machine, since waiting for a core does not count."""

    def __init__(self, pid: int) -> None:
        self.path = Path(f"/proc/{pid}/stat")

    def seconds(self) -> float:
        if not self.path.exists():
            return float("nan")
        # utime and stime, fields 14 and 15, after the parenthesised command name.
        fields = self.path.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(
    name: str, count: int, elapsed: float, latencies: list[float], baseline: float, cpu: float
) -> None:
    rate = count / elapsed
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(
        f"{name:<22} {rate:8.1f}/s  p50 {statistics.median(ordered) * 1000:6.1f} ms  "
        f"p99 {p99 * 1000:6.1f} ms  ratio to /livez {rate / baseline:5.3f}  "
        f"server CPU {cpu / count * 1000:5.2f} ms/request"
    )


async def timed_phase(
    port: int, token: str, requests: list[Request], concurrency: int, server: ServerCpu
) -> tuple[float, list[float], float]:
    cpu_before = server.seconds()
    elapsed, latencies = await run_phase(port, token, requests, concurrency)
    return elapsed, latencies, server.seconds() - cpu_before


async def bench(
    port: int, token: str, nodes: int, concurrency: int, rounds: int, server: ServerCpu
) -> None:
    names = [f"bench-node-{i:05d}" for i in range(nodes)]
    # Warm up and create every node with its devices.
    await run_phase(
        port,
        token,
        [("POST", "/api/v1/ingest/listandwatch", plugin_snapshot(n, 1)) for n in names],
        concurrency,
    )
    livez = [("GET", "/livez", None)] * (nodes * rounds)
    elapsed, lat, cpu = await timed_phase(port, token, livez, concurrency, server)
    baseline = len(livez) / elapsed
    report("GET /livez (baseline)", len(livez), elapsed, lat, baseline, cpu)

    seq = 1
    changed: list[Request] = []
    for r in range(rounds):
        seq += 1
        changed += [
            ("POST", "/api/v1/ingest/podresources", pods_snapshot(n, seq, r)) for n in names
        ]
    elapsed, lat, cpu = await timed_phase(port, token, changed, concurrency, server)
    report("changed snapshots", len(changed), elapsed, lat, baseline, cpu)

    unchanged: list[Request] = []
    for _ in range(rounds):
        seq += 1
        unchanged += [
            ("POST", "/api/v1/ingest/podresources", pods_snapshot(n, seq, rounds - 1))
            for n in names
        ]
    elapsed, lat, cpu = await timed_phase(port, token, unchanged, concurrency, server)
    report("unchanged snapshots", len(unchanged), elapsed, lat, baseline, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="snapshots per node per phase")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="devicedeck-bench-"))
    port = free_port()
    process, token = start_service(database_url(args.db, workdir), port, workdir)
    try:
        print(
            f"database={args.db} nodes={args.nodes} devices/node={DEVICES_PER_NODE} "
            f"concurrency={args.concurrency} rounds={args.rounds} cpus={os.cpu_count()}"
        )
        server = ServerCpu(process.pid)
        asyncio.run(bench(port, token, args.nodes, args.concurrency, args.rounds, server))
    finally:
        stop_service(process, workdir)


if __name__ == "__main__":
    main()
