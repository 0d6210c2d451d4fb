"""Reads, code against code: two services on one filled database, asked in turn.

    .venv/bin/python bench/scale.py --nodes 5000 --database devicedeck_scale   # fills it
    git worktree add /tmp/before <commit>
    .venv/bin/python bench/reads_ab.py --other /tmp/before --rounds 60

Starts `devicedeck serve` (one worker, auth on) of this checkout's code and of the other's (both
run with this virtualenv) on the database a bench/scale.py run filled, then sends each request to
one and then the other, alternating which goes first, over one keep-alive connection each. Both
see the same machine at the same moment, so the ratio of their median wall times holds while the
machine's speed swings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from ingest import ROOT, free_port, start_service, stop_service
from query_cpu import SCALE_DATABASE

PATHS = (
    "/api/v1/devices?limit=50",
    "/api/v1/devices?node=gpu-node-02500",
    "/api/v1/devices?resource=nvidia.com/mig-1g.10gb&allocated=false",
    "/api/v1/devices?sort=-health",
    "/api/v1/nodes?limit=50",
    "/api/v1/pods?limit=50",
    "/api/v1/resources",
    "/nodes/gpu-node-02500",
    "/nodes",
    "/devices",
    "/pods",
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--other", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=60, help="requests per path and code")
    parser.add_argument("--database-url", default=SCALE_DATABASE)
    parser.add_argument("--path", action="append", help="a request path (repeatable)")
    args = parser.parse_args()

    # The fleet was filled long ago: its nodes must not turn stale while this runs.
    os.environ["DEVICEDECK_STALE_AFTER"] = "86400"
    started = []
    for checkout in (ROOT, args.other):
        port, workdir = free_port(), Path(tempfile.mkdtemp(prefix="devicedeck-reads-ab-"))
        process, token = start_service(args.database_url, port, workdir, checkout)
        started.append((process, workdir, port, token))
    clients = [
        httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        for _, _, port, token in started
    ]
    try:
        print(f"{'path':66s} {'this ms':>8s} {'other ms':>8s} {'ratio':>6s}")
        ratios = []
        for path in args.path or PATHS:
            walls: list[list[float]] = [[], []]
            for round_ in range(args.rounds):
                for which in (0, 1) if round_ % 2 else (1, 0):
                    began = time.perf_counter()
                    response = clients[which].get(path)
                    walls[which].append((time.perf_counter() - began) * 1000)
                    if response.status_code != 200:
                        raise SystemExit(f"{path}: {response.status_code} {response.text[:200]}")
            # The first rounds warm each service's caches and prepared statements.
            this, other = (statistics.median(w[5:]) for w in walls)
            ratios.append(this / other)
            print(f"{path:66s} {this:8.1f} {other:8.1f} {this / other:6.2f}")
        print(f"median ratio, this against other: {statistics.median(ratios):.2f}")
    finally:
        for client in clients:
            client.close()
        for process, workdir, _, _ in started:
            stop_service(process, workdir)


if __name__ == "__main__":
    main()
