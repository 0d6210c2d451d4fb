"""Node agent footprint at rest: resident memory and CPU time.

Starts the service (SQLite), a simulated node with 8 devices, creates 100 pods (one device
each for the first 8, none for the rest), starts `devicedeck agent` with its defaults
(10 s resync, 30 s heartbeat), waits until the service shows every device and allocation,
then samples /proc/<agent pid>/status (VmRSS, threads) and /proc/<pid>/stat (user + system
CPU time) once a second for --seconds. Prints the figures; the target is under 80 MB RSS
and near-zero CPU at rest. Then, --changes times, deletes a pod holding a device and creates
another asking for one, timing how long each takes to show in the service's API (the target:
within 3 s each, at the agent's default settings). With --baseline-pods-interval S it first
runs the same with the agent's `--pods-interval S` (S = 10, the full re-read: how the agent saw
a pod end before it asked for pods on their own) and prints the ratios of the two.

    .venv/bin/python bench/agent.py --seconds 30
    .venv/bin/python bench/agent.py --seconds 20 --changes 5 --baseline-pods-interval 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicedeck.sim.kubelet.control import ControlError, call, control_socket_path  # noqa: E402

DEVICEDECK = [sys.executable, "-m", "devicedeck.cli"]
RESOURCE = "example.com/gpu"
NODE = "bench-node"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def rss_and_threads(pid: int) -> tuple[int, int]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]), int(fields["Threads"])


def cpu_seconds(pid: int) -> float:
    # Fields after the command name (which may contain spaces) are space separated;
    # utime and stime are the 14th and 15th fields of the whole line.
    after = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(after[11]) + int(after[12])) / CLOCK_TICKS


class Child:
    def __init__(self, argv: list[str], log: Path, env: dict[str, str]) -> None:
        self._log: IO[bytes] = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def run(
    seconds: float,
    devices: int,
    pods: int,
    changes: int,
    workdir: Path,
    agent_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVICEDECK_")}
    env.update(
        DEVICEDECK_DATABASE_URL=f"sqlite:///{workdir / 'bench.db'}",
        DEVICEDECK_AUTH="token",
        DEVICEDECK_LOG_LEVEL="WARNING",
    )
    subprocess.run([*DEVICEDECK, "migrate"], env=env, check=True, cwd=ROOT, capture_output=True)

    def token(name: str, scope: str) -> str:
        made = subprocess.run(
            [*DEVICEDECK, "token", "create", "--name", name, "--scope", scope]
            + (["--all-nodes"] if scope == "ingest" else []),
            env=env,
            check=True,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        return made.stdout.strip().splitlines()[-1]

    ingest_token, read_token = token("bench-agent", "ingest"), token("bench-reader", "read")
    token_file = workdir / "token"
    token_file.write_text(ingest_token)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    root = workdir / "kubelet"
    children: list[Child] = []
    try:
        children.append(
            Child(
                [*DEVICEDECK, "serve", "--port", str(port), "--no-migrate"],
                workdir / "serve.log",
                env,
            )
        )
        children.append(
            Child(
                [
                    *DEVICEDECK,
                    "sim-node",
                    "--root",
                    str(root),
                    "--plugin",
                    f"{RESOURCE}:{devices}:gpu",
                ],
                workdir / "node.log",
                env,
            )
        )

        def node_ready() -> bool:
            try:
                status = call(control_socket_path(root), {"op": "node.status"}, timeout=2)
            except (ControlError, OSError):
                return False
            return status["resources"].get(RESOURCE, {}).get("allocatable") == devices

        wait_for(node_ready, 60, "the simulated node")
        for i in range(pods):
            requests = {RESOURCE: 1} if i < devices else {}
            call(
                control_socket_path(root),
                {
                    "op": "pod.create",
                    "namespace": "bench",
                    "name": f"pod-{i:03d}",
                    "containers": [{"name": "main", "requests": requests}],
                },
            )
        agent = Child(
            [
                *DEVICEDECK,
                "agent",
                "--node",
                NODE,
                "--server",
                url,
                "--token-file",
                str(token_file),
                "--kubelet-root",
                str(root),
                *agent_args,
            ],
            workdir / "agent.log",
            env,
        )
        children.append(agent)
        started = time.monotonic()
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {read_token}"}) as api:

            def converged() -> bool:
                try:
                    page = api.get("/api/v1/devices", params={"node": NODE, "limit": 1000}).json()
                except (httpx.HTTPError, ValueError):
                    return False
                held = [d for d in page.get("results", []) if d["allocation"]]
                return len(page.get("results", [])) == devices and len(held) == devices

            wait_for(converged, 60, "the agent's snapshots in the service")
        converged_after = time.monotonic() - started
        pid = agent.proc.pid
        # Let start-up work settle before measuring rest.
        time.sleep(2)
        samples = []
        cpu_start, wall_start = cpu_seconds(pid), time.monotonic()
        while time.monotonic() - wall_start < seconds:
            samples.append(rss_and_threads(pid))
            time.sleep(1)
        cpu_used, wall = cpu_seconds(pid) - cpu_start, time.monotonic() - wall_start
        rss = [kb for kb, _ in samples]
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {read_token}"}) as api:
            deletes, creates = time_pod_changes(api, root, changes)
        return {
            "devices": devices,
            "pods": pods,
            "converged_seconds": round(converged_after, 2),
            "window_seconds": round(wall, 1),
            "rss_mb_max": round(max(rss) / 1024, 1),
            "rss_mb_last": round(rss[-1] / 1024, 1),
            "threads": samples[-1][1],
            "cpu_seconds": round(cpu_used, 3),
            "cpu_percent": round(100 * cpu_used / wall, 3),
            "pod_delete_seconds": deletes,
            "pod_create_seconds": creates,
        }
    finally:
        for child in reversed(children):
            child.stop()


def holders(api: httpx.Client) -> set[str]:
    page = api.get("/api/v1/devices", params={"node": NODE, "limit": 1000}).json()
    return {d["allocation"]["pod"] for d in page["results"] if d["allocation"]}


def time_pod_changes(api: httpx.Client, root: Path, rounds: int) -> tuple[list[float], list[float]]:
    """Seconds from each pod deletion, and each creation, at the kubelet to the service
    showing it."""
    taken: dict[str, list[float]] = {"pod.delete": [], "pod.create": []}
    for i in range(rounds):
        old, new = f"pod-{i:03d}", f"probe-{i:03d}"
        for op, spec, shown in (
            (
                "pod.delete",
                {"namespace": "bench", "name": old},
                lambda o=old: o not in holders(api),
            ),
            (
                "pod.create",
                {
                    "namespace": "bench",
                    "name": new,
                    "containers": [{"name": "main", "requests": {RESOURCE: 1}}],
                },
                lambda n=new: n in holders(api),
            ),
        ):
            started = time.monotonic()
            call(control_socket_path(root), {"op": op, **spec})
            wait_for(shown, 60, f"{op} of {spec['name']} in the service")
            taken[op].append(round(time.monotonic() - started, 2))
    return taken["pod.delete"], taken["pod.create"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="rest window (default 30)")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--changes", type=int, default=5, help="pod changes timed (default 5)")
    parser.add_argument(
        "--baseline-pods-interval",
        type=float,
        metavar="SECONDS",
        help="first run the agent with --pods-interval SECONDS, and compare",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    runs: list[tuple[str, tuple[str, ...]]] = []
    if args.baseline_pods_interval is not None:
        interval = f"{args.baseline_pods_interval:g}"
        runs.append((f"--pods-interval {interval}", ("--pods-interval", interval)))
    runs.append(("defaults", ()))
    results = {}
    for label, agent_args in runs:
        workdir = Path(tempfile.mkdtemp(prefix="ddbench", dir="/tmp"))
        try:
            results[label] = run(
                args.seconds, args.devices, args.pods, args.changes, workdir, agent_args
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(results))
        return 0
    for label, result in results.items():
        report(label, result)
    if len(results) == 2:
        (_, baseline), (_, now) = results.items()
        print("defaults / baseline")
        for key in ("pod_delete_seconds", "pod_create_seconds"):
            if baseline[key] and now[key]:
                ratio = max(now[key]) / max(baseline[key])
                print(f"  {key.removesuffix('_seconds'):<18}  max {ratio:.2f}")
        if baseline["cpu_seconds"]:
            print(f"  CPU at rest         {now['cpu_seconds'] / baseline['cpu_seconds']:.2f}")
    return 0


def report(label: str, result: dict[str, Any]) -> None:
    print(f"agent ({label}) at rest: {result['devices']} devices, {result['pods']} pods")
    print(f"  converged in        {result['converged_seconds']} s after start")
    print(f"  window              {result['window_seconds']} s")
    print(
        f"  RSS max / last      {result['rss_mb_max']} / {result['rss_mb_last']} MB (target < 80)"
    )
    print(f"  threads             {result['threads']}")
    print(
        f"  CPU time            {result['cpu_seconds']} s ({result['cpu_percent']} % of one core)"
    )
    for kind in ("delete", "create"):
        taken = result[f"pod_{kind}_seconds"]
        if taken:
            print(f"  pod {kind} to API   {min(taken)}-{max(taken)} s, all {taken} (target < 3)")


if __name__ == "__main__":
    sys.exit(main())
