"""Reads, code against code: two services on one filled database, asked in turn.

    .venv/bin/python bench/scale.py --nodes 5000 --database devicedeck_scale   # fills it
    git worktree add /tmp/before <commit>
    .venv/bin/python bench/reads_ab.py --other /tmp/before --rounds 60

Starts `devicedeck serve` (one worker, auth on) from this checkout and from the other one, both
on the database a bench/scale.py run filled, then sends each request to one and then the other,
alternating which goes first, over one keep-alive connection each. Both see the same machine at
the same moment, so the ratio of their median wall times holds while the machine's speed swings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from ingest import ROOT, free_port, migrate_and_create_token
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


def start(checkout: Path, url: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "DEVICEDECK_DATABASE_URL": url, "DEVICEDECK_LOG_LEVEL": "WARNING"}
    # The fleet was filled long ago: its nodes must not turn stale while this runs.
    env["DEVICEDECK_STALE_AFTER"] = "86400"
    python = checkout / ".venv" / "bin" / "python"
    log = open(workdir / f"service-{port}.log", "wb")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(
        [str(python), "-m", "app.cli", "serve", "--port", str(port), "--no-migrate"],
        env=env,
        cwd=checkout,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/livez", timeout=1).status_code == 200:
                return process, base
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"the service of {checkout} did not start; see {log.name}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--other", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=60, help="requests per path and code")
    parser.add_argument("--database-url", default=SCALE_DATABASE)
    parser.add_argument("--path", action="append", help="a request path (repeatable)")
    args = parser.parse_args()

    env = {**os.environ, "DEVICEDECK_DATABASE_URL": args.database_url}
    token = migrate_and_create_token(env, ROOT)
    headers = {"Authorization": f"Bearer {token}"}
    workdir = Path(tempfile.mkdtemp(prefix="devicedeck-reads-ab-"))
    started = [
        start(ROOT, args.database_url, workdir),
        start(args.other, args.database_url, workdir),
    ]
    clients = [httpx.Client(base_url=base, headers=headers, timeout=60) for _, base in started]
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
        for process, _ in started:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
