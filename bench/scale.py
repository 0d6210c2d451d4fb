"""Fleet-scale benchmark: fill a fleet through the ingest API, then time every query and page.

Starts `devicedeck serve` (one uvicorn worker, auth on) on a new PostgreSQL database (or
SQLite), then:

1. fills NODES nodes through POST /api/v1/ingest/*, each node sending a ListAndWatch snapshot
   per resource (by default 8 GPUs and 56 MIG slices: 64 devices) and a PodResources snapshot
   in which pods hold half of them, with its allocatable list of all 64;
2. times every /api/v1 list query (each filter alone and combined, each sort, `q` search, a
   deep page reached through `next`), /api/v1/resources, every dashboard page, /metrics and
   /livez: p50 and p95 of RUNS sequential requests on one keep-alive connection;
3. with wrk (`apt-get install wrk`) drives ingest for a few seconds each: new nodes' real-size
   snapshots, 8-device health flips and unchanged snapshots, next to /livez in the same run;
4. reports the service's resident memory after the fill and after everything.

    .venv/bin/python bench/scale.py --nodes 625                  # 40,000 devices
    .venv/bin/python bench/scale.py --nodes 5000 --wrk-seconds 10  # 320,000 devices

`--checkout DIR` serves another checkout's code (`git worktree add DIR <commit>`, or
`git archive <commit> | tar -x -C DIR`) with this virtualenv, this script's workload unchanged:
before and after, in alternate runs, on the same machine.

Every figure is also given as a ratio to /livez measured in the same run: the machines this runs
on are shared, and their speed changes within minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from ingest import (
    ROOT,
    Connection,
    ServerCpu,
    cli,
    free_port,
    new_postgres_database,
    prepare,
    run_phase,
    stop_service,
)
from ingest import start_service as start_ingest_service

HERE = Path(__file__).resolve().parent
GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
NAMESPACES = 20
SICK_EVERY = 397  # one device in 397 reports Unhealthy


def node_name(n: int) -> str:
    return f"gpu-node-{n:05d}"


class Fleet:
    """The device mix of every node, and the snapshots that describe it."""

    def __init__(self, gpus: int, slices: int) -> None:
        self.gpus = gpus
        self.slices = slices

    def gpu_ids(self, n: int) -> list[str]:
        return [f"GPU-{n:05d}-{g}-5e1b-4f0d" for g in range(self.gpus)]

    def slice_ids(self, n: int) -> list[str]:
        per_gpu = max(1, self.slices // max(1, self.gpus))
        return [f"MIG-{n:05d}-{s // per_gpu}-{s % per_gpu}" for s in range(self.slices)]

    def listandwatch(
        self, node: str, n: int, resource: str, seq: Any, sick: int | None = None
    ) -> dict[str, Any]:
        ids = self.gpu_ids(n) if resource == GPU else self.slice_ids(n)
        devices = []
        for i, device_id in enumerate(ids):
            unhealthy = i == sick if sick is not None else (n * 64 + i) % SICK_EVERY == 0
            numa = i * 2 // max(1, len(ids))
            devices.append(
                {
                    "ID": device_id,
                    "health": "Unhealthy" if unhealthy else "Healthy",
                    "topology": {"nodes": [{"ID": numa}]},
                }
            )
        return {
            "node": node,
            "resource": resource,
            "source": {"boot_id": "scale", "seq": seq},
            "observed_at": "2026-12-03T00:00:00Z",
            "devices": devices,
        }

    def podresources(self, node: str, n: int, seq: Any) -> dict[str, Any]:
        """Pods hold half of each resource: trainers two GPUs each, inference pods one slice."""
        gpus, slices = self.gpu_ids(n), self.slice_ids(n)
        pods = []
        for p in range(len(gpus) // 4):
            held = gpus[p * 2 : p * 2 + 2]
            pods.append(self._pod(f"trainer-{n:05d}-{p}", n, GPU, held))
        for p in range(len(slices) // 2):
            pods.append(self._pod(f"infer-{n:05d}-{p}", n, MIG, [slices[p]]))
        return {
            "node": node,
            "source": {"boot_id": "scale", "seq": seq},
            "observed_at": "2026-12-03T00:00:00Z",
            "podResources": pods,
            "allocatable": {
                "devices": [
                    {"resourceName": GPU, "deviceIds": gpus},
                    {"resourceName": MIG, "deviceIds": slices},
                ]
            },
        }

    @staticmethod
    def _pod(name: str, n: int, resource: str, ids: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": f"team-{n % NAMESPACES:02d}",
            "containers": [
                {"name": "main", "devices": [{"resourceName": resource, "deviceIds": ids}]}
            ],
        }

    def node_snapshots(self, n: int, name: str | None = None, seq: Any = 1) -> list[Any]:
        node = name or node_name(n)
        requests: list[Any] = []
        if self.gpus:
            requests.append(
                ("POST", "/api/v1/ingest/listandwatch", self.listandwatch(node, n, GPU, seq))
            )
        if self.slices:
            requests.append(
                ("POST", "/api/v1/ingest/listandwatch", self.listandwatch(node, n, MIG, seq))
            )
        requests.append(("POST", "/api/v1/ingest/podresources", self.podresources(node, n, seq)))
        return requests


def rss_mb(pid: int) -> tuple[float, float]:
    """Resident memory now and at its peak (VmRSS, VmHWM), in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


class Poke:
    """A health flip on a node of its own, sent (untimed) before a request that must not be
    answered from the dashboard's page cache: the cache is keyed by the newest event."""

    def __init__(self, fleet: Fleet, token: str) -> None:
        self.fleet = fleet
        self.token = token
        self.seq = 0
        self.boot = f"poke-{time.time()}"

    async def send(self, connection: Connection) -> None:
        self.seq += 1
        snapshot = self.fleet.listandwatch("poke-node", 0, GPU, self.seq, sick=self.seq % 2)
        snapshot["source"]["boot_id"] = self.boot  # a new sequence in every run
        status, body = await connection.send(
            prepare(("POST", "/api/v1/ingest/listandwatch", snapshot), self.token)
        )
        if status != 200:
            raise SystemExit(f"poke answered {status}: {body[:300]!r}")


async def time_get(
    connection: Connection, token: str, path: str, runs: int, poke: Poke | None = None
) -> list[float]:
    request = prepare(("GET", path, None), token)
    status, body = await connection.send(request)  # warm: templates, plans, caches
    if status != 200:
        raise SystemExit(f"GET {path} answered {status}: {body[:300]!r}")
    timings = []
    for _ in range(runs):
        if poke is not None:
            await poke.send(connection)
        started = time.perf_counter()
        status, body = await connection.send(request)
        timings.append((time.perf_counter() - started) * 1000)
        if status != 200:
            raise SystemExit(f"GET {path} answered {status}: {body[:300]!r}")
    return timings


async def get_json(connection: Connection, token: str, path: str) -> Any:
    status, body = await connection.send(prepare(("GET", path, None), token))
    if status != 200:
        raise SystemExit(f"GET {path} answered {status}: {body[:300]!r}")
    return json.loads(body)


def local(url: str) -> str:
    return re.sub(r"^https?://[^/]+", "", url)


async def deep_page(connection: Connection, token: str, pages: int) -> str:
    """The `next` URL reached by following `pages` pages of 500 devices."""
    path = "/api/v1/devices?limit=500"
    for _ in range(pages):
        found = await get_json(connection, token, path)
        if not found["next"]:
            break
        path = local(found["next"])
    return path


async def queries(port: int, token: str, nodes: int, deep_pages: int) -> dict[str, str]:
    """Every query and page to time, by label, with the values this fleet has."""
    middle = node_name(nodes // 2)
    connection = await Connection.open(port)
    try:
        device = (await get_json(connection, token, f"/api/v1/devices?node={middle}&limit=1"))[
            "results"
        ][0]
        pod = (await get_json(connection, token, f"/api/v1/pods?node={middle}&limit=1"))["results"][
            0
        ]
        deep = await deep_page(connection, token, deep_pages)
    finally:
        connection.close()
    n = nodes // 2
    search = f"{n:05d}-3-"
    api = {
        "devices first page": "/api/v1/devices?limit=50",
        "devices node=": f"/api/v1/devices?node={middle}",
        f"devices resource={MIG}": f"/api/v1/devices?resource={MIG}",
        "devices health=Unhealthy": "/api/v1/devices?health=Unhealthy",
        "devices health=Healthy": "/api/v1/devices?health=Healthy",
        "devices allocated=true": "/api/v1/devices?allocated=true",
        "devices allocated=false": "/api/v1/devices?allocated=false",
        "devices namespace=": "/api/v1/devices?namespace=team-07",
        "devices namespace=&pod=": (
            f"/api/v1/devices?namespace={pod['namespace']}&pod={pod['name']}"
        ),
        "devices state=removed": "/api/v1/devices?state=removed",
        "devices state=any": "/api/v1/devices?state=any",
        f"devices q={search}": f"/api/v1/devices?q={search}",
        "devices resource=mig&allocated=false": f"/api/v1/devices?resource={MIG}&allocated=false",
        "devices resource&health&allocated": (
            f"/api/v1/devices?resource={GPU}&health=Healthy&allocated=false"
        ),
        "devices node&resource&allocated": (
            f"/api/v1/devices?node={middle}&resource={MIG}&allocated=true"
        ),
        **{
            f"devices sort={s}": f"/api/v1/devices?sort={s}"
            for s in ("-node", "resource", "device_id", "health", "-health", "id", "-id")
        },
        f"devices deep page ({deep_pages} x next, 500)": deep,
        "nodes first page": "/api/v1/nodes?limit=50",
        "nodes q=": f"/api/v1/nodes?q={middle[-4:]}",
        "nodes stale=false": "/api/v1/nodes?stale=false",
        "nodes stale=true": "/api/v1/nodes?stale=true",
        "nodes resource=": f"/api/v1/nodes?resource={MIG}",
        "nodes sort=-last_seen": "/api/v1/nodes?sort=-last_seen",
        "node detail": f"/api/v1/nodes/{middle}",
        "device detail": f"/api/v1/devices/{device['id']}",
        "pods first page": "/api/v1/pods?limit=50",
        "pods namespace=": "/api/v1/pods?namespace=team-07",
        "pods node=": f"/api/v1/pods?node={middle}",
        "pods q=": f"/api/v1/pods?q=trainer-{n:05d}",
        "pod detail": f"/api/v1/pods/{pod['namespace']}/{pod['name']}",
        "events first page": "/api/v1/events",
        "events node=": f"/api/v1/events?node={middle}",
        "events kind=": "/api/v1/events?kind=health_changed",
        "resources": "/api/v1/resources",
    }
    pages = {
        "page /": "/",
        "page / after a change (no cache)": "/",
        "page /nodes": "/nodes",
        "page /nodes/NAME": f"/nodes/{middle}",
        "page /devices": "/devices",
        "page /devices filtered": f"/devices?resource={MIG}&allocated=no&health=Healthy",
        "page /devices?q=": f"/devices?q={search}",
        "page /devices/ID": f"/devices/{device['id']}",
        "page /pods": "/pods",
        "page /events": "/events",
    }
    return {**api, **pages, "/metrics": "/metrics", "/livez": "/livez"}


async def time_queries(
    port: int, token: str, targets: dict[str, str], runs: int, fleet: Fleet, server: ServerCpu
) -> list[Any]:
    connection = await Connection.open(port)
    poke = Poke(fleet, token)
    rows = []
    try:
        for label, path in targets.items():
            cold = poke if "no cache" in label else None
            before = server.seconds()
            timings = await time_get(connection, token, path, runs, cold)
            # The service's CPU per request: steadier than wall time on a busy machine, where
            # waiting for a core counts in the latency but not here.
            cpu = (server.seconds() - before) / (runs + 1) * 1000
            rows.append((label, statistics.median(timings), percentile(timings, 0.95), cpu))
    finally:
        connection.close()
    return rows


def print_queries(rows: list[Any]) -> None:
    livez = next(p95 for label, _, p95, _ in rows if label == "/livez")
    print(f"\n{'query':<48} {'p50 ms':>8} {'p95 ms':>8} {'p95 / livez':>12} {'CPU ms':>7}")
    for label, p50, p95, cpu in rows:
        print(f"{label:<48} {p50:8.1f} {p95:8.1f} {p95 / livez:12.0f} {cpu:7.1f}")


class Wrk:
    """Runs wrk with the snapshot script, one thread and CONNECTIONS keep-alive connections."""

    def __init__(self, port: int, token: str, seconds: int, connections: int, workdir: Path):
        self.url = f"http://127.0.0.1:{port}"
        self.token = token
        self.seconds = seconds
        self.connections = connections
        self.workdir = workdir

    def run(self, label: str, lines: list[tuple[str, int, dict[str, Any]]], seq: int) -> float:
        """Requests per second; lines are (path, seq offset, body with seq '@SEQ@')."""
        file = self.workdir / f"{label}.txt"
        with file.open("w") as out:
            for path, offset, body in lines:
                text = json.dumps(body, separators=(",", ":")).replace('"@SEQ@"', "@SEQ@")
                out.write(f"{path}\t{offset}\t{text}\n")
        args = [str(file), self.token, str(seq)]
        script = str(HERE / "scale_snapshots.lua")
        once = len(lines) if label == "new-nodes" else None
        return self._wrk(["-s", script, f"{self.url}/", "--", *args], once)

    def livez(self) -> float:
        return self._wrk([f"{self.url}/livez"], None)

    def _wrk(self, args: list[str], lines: int | None) -> float:
        command = ["wrk", "-t1", f"-c{self.connections}", f"-d{self.seconds}s", *args]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        if "Non-2xx" in done.stdout or done.stderr.strip():
            raise SystemExit(f"wrk saw errors:\n{done.stdout}\n{done.stderr}")
        total = int(re.search(r"(\d+) requests in", done.stdout).group(1))  # type: ignore[union-attr]
        if lines is not None and total > lines:
            print(f"  (all {lines} new nodes' snapshots were sent; later ones repeated them)")
        return float(re.search(r"Requests/sec:\s+([\d.]+)", done.stdout).group(1))  # type: ignore[union-attr]


def ingest_rates(fleet: Fleet, nodes: int, wrk: Wrk, server: ServerCpu) -> None:
    print(f"\ningest with wrk, 1 thread, {wrk.connections} connections, {wrk.seconds} s each")
    livez = wrk.livez()
    print(f"{'GET /livez (baseline)':<34} {livez:9.1f}/s")

    def show(label: str, rate: float, cpu: float, count: float) -> None:
        print(
            f"{label:<34} {rate:9.1f}/s  ratio to /livez {rate / livez:6.3f}  "
            f"server CPU {cpu / max(count, 1) * 1000:6.2f} ms/snapshot"
        )

    # New nodes: each sends its slices' ListAndWatch and, eight lines later (so never in flight
    # at the same time as its first), its PodResources snapshot.
    fresh = max(2000, 400 * wrk.seconds)
    run = int(time.time())  # new names in every run, also on a reused database
    lines: list[tuple[str, int, dict[str, Any]]] = []
    for k in range(fresh):
        name = f"new-node-{run}-{k:06d}"
        lines.append(("/api/v1/ingest/listandwatch", 0, fleet.listandwatch(name, k, MIG, "@SEQ@")))
        if k >= 8:
            earlier = f"new-node-{run}-{k - 8:06d}"
            lines.append(
                ("/api/v1/ingest/podresources", 0, fleet.podresources(earlier, k - 8, "@SEQ@"))
            )
    before = server.seconds()
    rate = wrk.run("new-nodes", lines, 1)
    show("new-node real-size snapshots", rate, server.seconds() - before, rate * wrk.seconds)

    # Health flips: a GPU turns Unhealthy in one pass over the fleet, Healthy in the next.
    flips: list[tuple[str, int, dict[str, Any]]] = []
    for offset, sick in ((0, 1), (1, None)):
        for n in range(nodes):
            snapshot = fleet.listandwatch(node_name(n), n, GPU, "@SEQ@", sick=sick)
            if sick is None:
                for device in snapshot["devices"]:
                    device["health"] = "Healthy"
            flips.append(("/api/v1/ingest/listandwatch", offset, snapshot))
    # Seqs above any a reused fleet's streams have seen: every run starts from the clock.
    base_seq = int(time.time())
    before = server.seconds()
    rate = wrk.run("flips", flips, base_seq)
    show(f"{fleet.gpus}-device health flips", rate, server.seconds() - before, rate * wrk.seconds)

    # Unchanged: each node's PodResources snapshot as filled, with a higher seq.
    same = [
        ("/api/v1/ingest/podresources", 0, fleet.podresources(node_name(n), n, "@SEQ@"))
        for n in range(nodes)
    ]
    before = server.seconds()
    rate = wrk.run("unchanged", same, base_seq + 1_000_000)
    show("unchanged real-size snapshots", rate, server.seconds() - before, rate * wrk.seconds)


async def fill(port: int, token: str, fleet: Fleet, nodes: int, concurrency: int) -> None:
    started = time.perf_counter()
    batch = 200
    sent = 0
    for first in range(0, nodes, batch):
        requests = []
        for n in range(first, min(nodes, first + batch)):
            requests += fleet.node_snapshots(n)
        await run_phase(port, token, requests, concurrency)
        sent += len(requests)
        rate = sent / (time.perf_counter() - started)
        print(f"  filled {min(nodes, first + batch):,} nodes, {rate:.1f} snapshots/s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--nodes", type=int, default=625)
    parser.add_argument("--gpus", type=int, default=8, help="GPU devices per node")
    parser.add_argument("--slices", type=int, default=56, help="MIG slice devices per node")
    parser.add_argument("--runs", type=int, default=25, help="timed requests per query")
    parser.add_argument("--deep-pages", type=int, default=20, help="pages of 500 before timing")
    parser.add_argument("--concurrency", type=int, default=8, help="connections while filling")
    parser.add_argument("--wrk-seconds", type=int, default=10, help="0: no ingest rates")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="time the fleet the last PostgreSQL run left (same --nodes) instead of a new fill",
    )
    parser.add_argument(
        "--database",
        default="devicedeck_scale",
        help="the PostgreSQL database to fill (dropped first) or reuse",
    )
    parser.add_argument(
        "--checkout",
        type=Path,
        default=ROOT,
        help="serve this checkout's code (its package devicedeck/, or app/ before the rename)",
    )
    args = parser.parse_args()
    checkout = args.checkout.resolve()

    workdir = Path(tempfile.mkdtemp(prefix="devicedeck-scale-"))
    port = free_port()
    url = f"sqlite:///{workdir / 'bench.db'}" if args.db == "sqlite" else None
    if url is None and args.reuse:
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{args.database}"
    url = url or new_postgres_database(args.database)
    # The fill takes minutes: nodes must not turn stale (and be swept) while it runs.
    os.environ["DEVICEDECK_STALE_AFTER"] = "86400"
    process, token = start_ingest_service(url, port, workdir, checkout)
    fleet = Fleet(args.gpus, args.slices)
    devices = args.nodes * (args.gpus + args.slices)
    print(f"code: {checkout} ({' '.join(cli(checkout)[1:])})")
    print(
        f"database={args.db} nodes={args.nodes:,} devices={devices:,} "
        f"({args.gpus} GPUs + {args.slices} slices a node) runs={args.runs} cpus={os.cpu_count()}",
        flush=True,
    )
    try:
        if not args.reuse:
            started = time.perf_counter()
            asyncio.run(fill(port, token, fleet, args.nodes, args.concurrency))
            print(f"fill took {time.perf_counter() - started:.0f} s")
        if args.db == "postgresql":
            # Statistics and visibility maps, as autovacuum gives a service that has run a while.
            with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
        print("service RSS after fill: {:.0f} MB (peak {:.0f} MB)".format(*rss_mb(process.pid)))
        targets = asyncio.run(queries(port, token, args.nodes, args.deep_pages))
        print_queries(
            asyncio.run(
                time_queries(port, token, targets, args.runs, fleet, ServerCpu(process.pid))
            )
        )
        print("service RSS after queries: {:.0f} MB (peak {:.0f} MB)".format(*rss_mb(process.pid)))
        if args.wrk_seconds:
            wrk = Wrk(port, token, args.wrk_seconds, 8, workdir)
            ingest_rates(fleet, args.nodes, wrk, ServerCpu(process.pid))
        print("service RSS at the end: {:.0f} MB (peak {:.0f} MB)".format(*rss_mb(process.pid)))
    finally:
        stop_service(process, workdir)


if __name__ == "__main__":
    main()
