"""Cost of changed ListAndWatch snapshots on PostgreSQL, code against code.

Two kinds of snapshot, as bench/scale.py sends them: a new node's 56-device MIG slice list,
and an 8-device GPU list whose one device flips between Healthy and Unhealthy. Calls the ASGI
app directly (no HTTP server, no load generator), one request at a time, in two processes: one
runs the code of this checkout, the other the code of another checkout (an earlier commit, for
example `git archive <commit> | tar -x -C /tmp/before`). They take turns, a block of requests
each, so both see the same machine. For each kind it prints the median service CPU per
snapshot and wall time per snapshot (which includes PostgreSQL's work, triggers included, as
requests go one at a time), and the median ratio this/other.

    .venv/bin/python bench/listandwatch_cpu.py --other /tmp/before --blocks 20

With --plugin every snapshot also carries its plugin's registration, as a tapped plugin's do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from ingest import migrate_and_create_token, new_postgres_database
from scale import GPU, MIG, Fleet
from turns import medians, take_turns
from unchanged_cpu import post

ROOT = Path(__file__).resolve().parents[1]
FLIP_NODES = 50
BLOCK = 100
KINDS = ("new-node", "flip")


PLUGIN = {"endpoint": "nvidia-gpu.sock", "version": "v1beta1"}


async def serve_blocks(database: str, plugin: bool) -> None:
    """Child: set up, print "ready", then run one block of each kind per line read from stdin
    and print, per kind, CPU and wall milliseconds per snapshot; an empty line ends it."""
    sys.path.insert(0, str(Path.cwd()))
    from devicedeck.config import Settings
    from devicedeck.main import create_app

    url = new_postgres_database(database)
    token = migrate_and_create_token({**os.environ, "DEVICEDECK_DATABASE_URL": url}, Path.cwd())
    os.environ["DEVICEDECK_LOG_LEVEL"] = "WARNING"
    app = create_app(Settings(database_url=url))
    fleet = Fleet(gpus=8, slices=56)
    path_body = "/api/v1/ingest/listandwatch"
    fresh = 0
    seq = 1

    def new_nodes() -> list[bytes]:
        nonlocal fresh
        bodies = []
        for _ in range(BLOCK):
            fresh += 1
            body = fleet.listandwatch(f"new-node-{fresh:06d}", fresh, MIG, 1)
            if plugin:
                body["plugin"] = PLUGIN
            bodies.append(json.dumps(body).encode())
        return bodies

    def flips() -> list[bytes]:
        nonlocal seq
        bodies: list[bytes] = []
        while len(bodies) < BLOCK:
            seq += 1
            for n in range(FLIP_NODES):
                body = fleet.listandwatch(f"flip-node-{n:05d}", n, GPU, seq, sick=seq % 2)
                if seq % 2 == 0:
                    for device in body["devices"]:
                        device["health"] = "Healthy"
                if plugin:
                    body["plugin"] = PLUGIN
                bodies.append(json.dumps(body).encode())
        return bodies

    async def timed(bodies: list[bytes]) -> str:
        started, wall = time.process_time(), time.perf_counter()
        for body in bodies:
            if b'"changed":true' not in await post(app, body, token, path_body):
                raise SystemExit("a changed snapshot was answered unchanged")
        cpu, wall = time.process_time() - started, time.perf_counter() - wall
        return f"{cpu / len(bodies) * 1000:.4f} {wall / len(bodies) * 1000:.4f}"

    async with app.router.lifespan_context(app):
        for _ in range(3):  # the first creates the flip nodes; the rest warm up
            for body in [*new_nodes(), *flips()]:
                await post(app, body, token, path_body)
        loop = asyncio.get_running_loop()
        print("ready", flush=True)
        while (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            print(await timed(new_nodes()), await timed(flips()), flush=True)


def compare(other: Path, blocks: int, plugin: bool, prefix: str) -> None:
    options = ["--plugin"] if plugin else []
    databases = (f"{prefix}_this", f"{prefix}_other")
    these, those = take_turns(__file__, (ROOT, other), databases, options, blocks)
    print(f"{blocks} blocks of {BLOCK} snapshots of each kind, one at a time, in turns")
    for k, kind in enumerate(KINDS):
        for m, measure in enumerate(("CPU", "wall")):
            i = k * 2 + m
            mine, theirs, ratio = medians(these, those, i)
            print(
                f"{kind:<9} {measure:<4} ms/snapshot: this {mine:7.3f}  other {theirs:7.3f}  "
                f"median ratio this/other {ratio:.3f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--other", type=Path, help="another checkout to compare with")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--plugin", action="store_true", help="snapshots carry a registration")
    parser.add_argument(
        "--databases",
        default="devicedeck_lw",
        help="prefix of the two databases it creates, for runs side by side",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(serve_blocks(args.child, args.plugin))
    else:
        compare((args.other or ROOT).resolve(), args.blocks, args.plugin, args.databases)


if __name__ == "__main__":
    main()
