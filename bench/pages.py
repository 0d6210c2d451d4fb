"""Server time of the dashboard pages with a large inventory (a benchmark, not a test).

    .venv/bin/python -m bench.pages                      # SQLite file in a temp dir
    .venv/bin/python -m bench.pages --database-url postgresql+psycopg://postgres@127.0.0.1/bench

Loads NODES nodes with DEVICES_PER_NODE GPUs each (bulk inserts, not the ingest path: this
measures reading), half of them held by pods, a few unhealthy, some nodes stale, and a day of
events; then times each page through the ASGI app and prints p50/p95/max per page.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import insert, select, text

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, Settings
from devicedeck.db import create_db_engine
from devicedeck.inventory.models import Allocation, Base, Device, Event, Node
from devicedeck.main import create_app
from devicedeck.migrate import upgrade_to_head

GPU = "nvidia.com/gpu"
NODES = 5000
DEVICES_PER_NODE = 8
RUNS = 40


def load(url: str, nodes: int, per_node: int) -> None:
    engine = create_db_engine(url)
    now = utcnow()
    long_ago = now - timedelta(days=3)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
            conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
        stale_every = 250  # 20 stale nodes in 5,000
        conn.execute(
            insert(Node),
            [
                {
                    "name": f"gpu-node-{n:05d}",
                    "first_seen": long_ago,
                    "last_seen": now - timedelta(hours=2) if n % stale_every == 0 else now,
                }
                for n in range(nodes)
            ],
        )
        ids = dict(conn.execute(select(Node.name, Node.id)).all())
        devices = []
        for n in range(nodes):
            for i in range(per_node):
                sick = (n * per_node + i) % 397 == 0
                devices.append(
                    {
                        "node_id": ids[f"gpu-node-{n:05d}"],
                        "resource": GPU,
                        "device_id": f"GPU-{n:05d}-{i:02d}-5e1b-4f0d-9c2e",
                        "health": "Unhealthy" if sick else "Healthy",
                        "raw_health": "Unhealthy" if sick else "Healthy",
                        "health_source": "plugin",
                        "numa_nodes": [0 if i < per_node // 2 else 1],
                        "state": "present",
                        "first_seen": long_ago,
                        "last_seen": now,
                        "health_changed_at": long_ago,
                    }
                )
        for offset in range(0, len(devices), 5000):
            conn.execute(insert(Device), devices[offset : offset + 5000])
        rows = conn.execute(select(Device.id, Device.node_id, Device.device_id)).all()
        allocations, events = [], []
        for index, (pk, node_id, device_id) in enumerate(rows):
            node_name = f"gpu-node-{(node_id - 1):05d}"
            events.append(
                _event(long_ago, "device_added", node_name, device_id, pk, {"health": "Healthy"})
            )
            if index % 2 == 0:
                started = now - timedelta(minutes=(index * 7) % 1400)
                pod = f"trainer-{index // 2}"
                allocations.append(
                    {
                        "node_id": node_id,
                        "device_pk": pk,
                        "namespace": "ml",
                        "pod": pod,
                        "container": "main",
                        "resource": GPU,
                        "device_id": device_id,
                        "started": started,
                    }
                )
                event = _event(started, "allocated", node_name, device_id, pk, None)
                events.append({**event, "namespace": "ml", "pod": pod, "container": "main"})
        for offset in range(0, len(allocations), 5000):
            conn.execute(insert(Allocation), allocations[offset : offset + 5000])
        events.sort(key=lambda e: e["at"])
        for offset in range(0, len(events), 5000):
            conn.execute(insert(Event), events[offset : offset + 5000])
    # Statistics and visibility maps, as autovacuum gives a service that has run a while.
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE" if engine.dialect.name == "postgresql" else "ANALYZE"))
    engine.dispose()


def _event(at: Any, kind: str, node: str, device_id: str, pk: int, after: Any) -> dict[str, Any]:
    return {
        "at": at,
        "kind": kind,
        "node": node,
        "resource": GPU,
        "device_id": device_id,
        "device_pk": pk,
        "after": after,
        "actor": "bench",
    }


PAGES = {
    "overview": "/",
    "nodes": "/nodes",
    "node": "/nodes/gpu-node-02500",
    "devices (filtered)": f"/devices?resource={GPU}&allocated=no&health=Healthy",
    "devices (ID search)": "/devices?q=-01-5e1b",
    "devices (first page)": "/devices",
    "events": "/events",
}


def measure(url: str, runs: int) -> dict[str, list[float]]:
    # Nodes were "seen" at load time; an hour keeps them fresh for the whole run, while the
    # ones last seen two hours ago stay stale.
    settings = Settings(database_url=url, auth=AuthMode.OFF, stale_after=3600)
    timings: dict[str, list[float]] = {name: [] for name in PAGES}
    app = create_app(settings)
    with TestClient(app) as client:
        for name, path in PAGES.items():
            assert client.get(path).status_code == 200, path  # warm caches and templates
            for _ in range(runs):
                # Cold every time: the page cache would otherwise answer all but the first.
                app.state.ui_cache.clear()
                started = time.perf_counter()
                response = client.get(path)
                timings[name].append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="default: a new SQLite file in a temp dir")
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--devices-per-node", type=int, default=DEVICES_PER_NODE)
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dd-bench") as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        upgrade_to_head(url)
        started = time.perf_counter()
        load(url, args.nodes, args.devices_per_node)
        print(
            f"loaded {args.nodes:,} nodes, {args.nodes * args.devices_per_node:,} devices "
            f"in {time.perf_counter() - started:.1f}s ({url.split(':')[0]})"
        )
        timings = measure(url, args.runs)
    print(f"{'page':<22} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    for name, values in timings.items():
        values.sort()
        p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
        print(f"{name:<22} {statistics.median(values):8.1f} {p95:8.1f} {values[-1]:8.1f}")


if __name__ == "__main__":
    main()
