"""CPU cost of an unchanged PodResources snapshot on PostgreSQL, code against code.

Calls the ASGI app directly (no HTTP server, no load generator) in two processes: one runs the
code of this checkout, the other the code of another checkout (a git worktree of an earlier
commit). They take turns, a block of requests each, so both see the same machine; the result is
the median ratio of CPU time per request, which a shared machine's swings in speed leave alone.

    git worktree add /tmp/before <commit>
    .venv/bin/python bench/unchanged_cpu.py --other /tmp/before --blocks 60

The snapshot is a small one (two pods, four devices) unless `--real-size`: then each node's is
bench/scale.py's, 32 pods holding 36 of 64 devices, with the allocatable list of all 64.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ingest import migrate_and_create_token, new_postgres_database, pods_snapshot
from scale import Fleet
from turns import take_turns

ROOT = Path(__file__).resolve().parents[1]
NODES = 50
BLOCK = 100


async def post(
    app: Any, body: bytes, token: str, path: str = "/api/v1/ingest/podresources"
) -> bytes:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:
            await asyncio.Event().wait()
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    answer: list[bytes] = []
    status: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif message["type"] == "http.response.body":
            answer.append(message.get("body", b""))

    await app(scope, receive, send)
    if status != [200]:
        raise SystemExit(f"answered {status}: {b''.join(answer)!r}")
    return b"".join(answer)


async def serve_blocks(database: str, real_size: bool) -> None:
    """Child: set up, print "ready", then run one block per line read from stdin and print its
    CPU milliseconds per request; an empty line ends it."""
    # The app comes from the checkout this child runs in, which may not be this one.
    sys.path.insert(0, str(Path.cwd()))
    from devicedeck.config import Settings
    from devicedeck.main import create_app

    url = new_postgres_database(database)
    token = migrate_and_create_token({**os.environ, "DEVICEDECK_DATABASE_URL": url}, Path.cwd())
    os.environ["DEVICEDECK_LOG_LEVEL"] = "WARNING"
    app = create_app(Settings(database_url=url))
    nodes = [f"bench-node-{i:05d}" for i in range(NODES)]
    seq = 1

    fleet = Fleet(gpus=8, slices=56)

    def snapshot(n: int, node: str) -> dict[str, Any]:
        return fleet.podresources(node, n, seq) if real_size else pods_snapshot(node, seq, 0)

    def next_round() -> list[bytes]:
        nonlocal seq
        seq += 1
        return [json.dumps(snapshot(n, node)).encode() for n, node in enumerate(nodes)]

    async with app.router.lifespan_context(app):
        for _ in range(5):  # the first creates the nodes; the rest warm up
            for body in next_round():
                await post(app, body, token)
        loop = asyncio.get_running_loop()
        print("ready", flush=True)
        while (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            bodies: list[bytes] = []
            while len(bodies) < BLOCK:
                bodies += next_round()
            started = time.process_time()
            for body in bodies:
                if b'"changed":false' not in await post(app, body, token):
                    raise SystemExit("a repeated snapshot was not unchanged")
            elapsed = time.process_time() - started
            print(f"{elapsed / len(bodies) * 1000:.4f}", flush=True)


def compare(other: Path, blocks: int, real_size: bool, prefix: str) -> None:
    options = ["--real-size"] if real_size else []
    databases = (f"{prefix}_this", f"{prefix}_other")
    these, those = take_turns(__file__, (ROOT, other), databases, options, blocks)
    ratios = [mine[0] / theirs[0] for mine, theirs in zip(these, those, strict=True)]
    quartiles = statistics.quantiles(ratios, n=4)
    mine, theirs = (statistics.median(b[0] for b in side) for side in (these, those))
    print(f"this checkout   CPU per unchanged snapshot: median {mine:.3f} ms")
    print(f"{other}  CPU per unchanged snapshot: median {theirs:.3f} ms")
    print(
        f"ratio this/other: median {statistics.median(ratios):.3f} "
        f"(quartiles {quartiles[0]:.3f}..{quartiles[2]:.3f}, {blocks} blocks of {BLOCK})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--other", type=Path, help="another checkout to compare with")
    parser.add_argument("--blocks", type=int, default=60)
    parser.add_argument("--real-size", action="store_true", help="bench/scale.py's snapshot")
    parser.add_argument(
        "--databases",
        default="devicedeck_cpu",
        help="prefix of the two databases it creates, for runs side by side",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(serve_blocks(args.child, args.real_size))
    else:
        compare((args.other or ROOT).resolve(), args.blocks, args.real_size, args.databases)


if __name__ == "__main__":
    main()
