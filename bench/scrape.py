"""Cost of a /metrics scrape at fleet scale, without filling the fleet through ingest.

Makes a new PostgreSQL database, migrates it, writes NODES nodes with 8 GPUs and 56 MIG slices
each (the counters follow through the database's own triggers) and pods holding half of them,
then times the fleet gauges a scrape renders, with and without per-device series:

    .venv/bin/python bench/scrape.py --nodes 5000      # 320,000 devices
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from ingest import new_postgres_database
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the app, run from bench/

from devicedeck.config import Settings
from devicedeck.db import create_db_engine, make_session_factory
from devicedeck.runtime.background import clock_of
from devicedeck.runtime.fleet_metrics import FleetGauges

ROOT = Path(__file__).resolve().parents[1]
DATABASE = "devicedeck_bench_scrape"
RESOURCES = (("nvidia.com/gpu", 8), ("nvidia.com/mig-1g.10gb", 56))

SEED = """
INSERT INTO nodes (name, first_seen, last_seen)
SELECT format('gpu-node-%s', lpad(n::text, 5, '0')), now(), now()
FROM generate_series(1, :nodes) AS n;
"""
DEVICES = """
INSERT INTO devices (node_id, resource, device_id, health, health_source, numa_nodes, state,
                     first_seen, last_seen)
SELECT nodes.id, CAST(:resource AS text), format('%s-%s', CAST(:prefix AS text), d),
       CASE WHEN (nodes.id * 64 + d) % 397 = 0 THEN 'Unhealthy' ELSE 'Healthy' END,
       'plugin', '[]', 'present', now(), now()
FROM nodes, generate_series(0, CAST(:per_node AS integer) - 1) AS d;
"""
HOLD = """
INSERT INTO allocations (node_id, device_pk, namespace, pod, container, resource, device_id,
                         started)
SELECT node_id, id, format('ns-%s', id % 20), format('pod-%s', id / 4), 'main', resource,
       device_id, now()
FROM devices WHERE id % 2 = 0;
"""


def timed(render: FleetGauges, runs: int) -> tuple[float, float, int]:
    """Median wall time, median CPU time of this process (the machines this runs on are
    shared: CPU time does not count the waits for a core), and the exposition's size."""
    times, cpu = [], []
    size = 0
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        size = len(render.render())
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return statistics.median(times), statistics.median(cpu), size


def fill(url: str, nodes: int) -> None:
    env = {**os.environ, "DEVICEDECK_DATABASE_URL": url}
    subprocess.run(
        [sys.executable, "-m", "devicedeck.cli", "migrate"], env=env, check=True, cwd=ROOT
    )
    engine = create_db_engine(url)
    with engine.begin() as conn:
        conn.execute(text(SEED), {"nodes": nodes})
        for resource, per_node in RESOURCES:
            prefix = "GPU" if resource.endswith("gpu") else "MIG"
            conn.execute(
                text(DEVICES), {"resource": resource, "prefix": prefix, "per_node": per_node}
            )
        conn.execute(text(HOLD))
        conn.execute(text("ANALYZE"))
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--reuse", action="store_true", help="time the database a previous run filled"
    )
    args = parser.parse_args()
    if args.reuse:
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{DATABASE}"
    else:
        url = new_postgres_database(DATABASE)
        fill(url, args.nodes)
    engine = create_db_engine(url)
    with engine.begin() as conn:
        devices = conn.execute(text("SELECT sum(devices) FROM device_counts")).scalar()
        nodes = conn.execute(text("SELECT count(*) FROM nodes")).scalar()
    print(f"{nodes} nodes, {devices} devices")
    settings = Settings(database_url=url, stale_after=timedelta(hours=1).total_seconds())
    factory = make_session_factory(engine)
    for per_device in (False, True):
        gauges = FleetGauges(factory, lambda: clock_of(settings), per_device=per_device)
        median, cpu, size = timed(gauges, args.runs if not per_device else 3)
        print(
            f"per_device={per_device}: median {median * 1000:.0f} ms wall, "
            f"{cpu * 1000:.0f} ms CPU in the service process, {size / 1e6:.1f} MB"
        )


if __name__ == "__main__":
    main()
