"""One query, repeated for a while against a fleet a bench/scale.py run left: wall time and the
service's CPU per request.

    .venv/bin/python bench/query_cpu.py /api/v1/pods/team-10/trainer-00050-1 --seconds 10

Starts `devicedeck serve` (one worker, auth on) on the PostgreSQL database bench/scale.py
filled (`devicedeck_scale`), sends the request over one keep-alive connection for SECONDS, and
prints the status, the count, the service's CPU per request and the mean wall time. Run it from
the checkout whose code is to be measured; two checkouts one after the other compare two codes
on the same data.
"""

from __future__ import annotations

import argparse
import http.client
import os
import tempfile
import time
from pathlib import Path

from ingest import ServerCpu, free_port, start_service, stop_service

SCALE_DATABASE = "postgresql+psycopg://postgres@127.0.0.1:5432/devicedeck_scale"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", help="the request path, with its query")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--database-url", default=SCALE_DATABASE)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="devicedeck-query-"))
    # The fleet was filled long ago: its nodes must not turn stale while this runs.
    os.environ["DEVICEDECK_STALE_AFTER"] = "86400"
    port = free_port()
    process, token = start_service(args.database_url, port, workdir)
    try:
        server = ServerCpu(process.pid)
        connection = http.client.HTTPConnection("127.0.0.1", port)
        headers = {"Authorization": f"Bearer {token}"}
        before = server.seconds()
        started = time.perf_counter()
        count, status = 0, 0
        while time.perf_counter() - started < args.seconds:
            connection.request("GET", args.path, headers=headers)
            response = connection.getresponse()
            response.read()
            status = response.status
            count += 1
        wall = (time.perf_counter() - started) / count * 1000
        cpu = (server.seconds() - before) / count * 1000
        print(f"{status} {count} requests, service CPU {cpu:.2f} ms/request, wall {wall:.1f} ms")
        connection.close()
    finally:
        stop_service(process, workdir)


if __name__ == "__main__":
    main()
