"""A small, believable cluster with a day of history, written through the ingest functions.

Snapshots are applied with past times (the API would stamp them "now"), so the charts and
timelines have something to draw. Deterministic: the same call gives the same data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.db import write_session
from devicedeck.inventory.models import Node
from devicedeck.inventory.schemas import ListAndWatchSnapshot, PodResourcesSnapshot
from devicedeck.inventory.write.ingest import apply_snapshot

GPU = "nvidia.com/gpu"
QAT = "qat.intel.com/generic"
BOOT = "seed-boot"


def gpu_id(node: int, index: int) -> str:
    return f"GPU-{node:02d}{index:02d}a7c3-5e1b-4f0d-9c2e-{node * 1000 + index:012d}"


@dataclass
class Cluster:
    """Writes snapshots for a set of nodes, keeping each stream's sequence numbers."""

    factory: sessionmaker[Session]
    seqs: dict[str, int] = field(default_factory=dict)

    def _seq(self, stream: str) -> int:
        self.seqs[stream] = self.seqs.get(stream, 0) + 1
        return self.seqs[stream]

    def devices(
        self, node: str, resource: str, devices: list[dict[str, Any]], at: datetime
    ) -> None:
        snapshot = ListAndWatchSnapshot.model_validate(
            {
                "node": node,
                "resource": resource,
                "source": {"boot_id": BOOT, "seq": self._seq(f"{node}/{resource}")},
                "observed_at": at.isoformat(),
                "plugin": {"endpoint": f"{resource.replace('/', '-')}.sock", "version": "v1beta1"},
                "devices": devices,
            }
        )
        with write_session(self.factory) as session:
            apply_snapshot(session, snapshot, now=at, actor="seed")

    def pods(self, node: str, pods: list[dict[str, Any]], at: datetime) -> None:
        snapshot = PodResourcesSnapshot.model_validate(
            {
                "node": node,
                "source": {"boot_id": BOOT, "seq": self._seq(f"{node}/pods")},
                "observed_at": at.isoformat(),
                "pod_resources": pods,
            }
        )
        with write_session(self.factory) as session:
            apply_snapshot(session, snapshot, now=at, actor="seed")


def device(device_id: str, numa: int | None, health: str = "Healthy") -> dict[str, Any]:
    body: dict[str, Any] = {"ID": device_id, "health": health}
    if numa is not None:
        body["topology"] = {"nodes": [{"ID": numa}]}
    return body


def pod(namespace: str, name: str, container: str, resource: str, *ids: str) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "name": name,
        "containers": [
            {"name": container, "devices": [{"resource_name": resource, "device_ids": list(ids)}]}
        ],
    }


def seed_cluster(factory: sessionmaker[Session], now: datetime, nodes: int = 6) -> Cluster:
    """`nodes` GPU nodes with 8 GPUs each on two NUMA nodes, half with QAT devices too; a day
    of pods coming and going; one GPU failing, one removed, and the last node gone stale."""
    cluster = Cluster(factory)
    start = now - timedelta(hours=23)
    names = [f"gpu-node-{n:02d}" for n in range(1, nodes + 1)]
    for n, name in enumerate(names, start=1):
        gpus = [device(gpu_id(n, i), 0 if i < 4 else 1) for i in range(8)]
        cluster.devices(name, GPU, gpus, start + timedelta(minutes=n))
        if n % 2 == 0:
            qats = [device(f"qat-{n}-{i}", i % 2) for i in range(4)]
            cluster.devices(name, QAT, qats, start + timedelta(minutes=n, seconds=30))
    # A day of training jobs: each node fills up over the morning and partly drains later.
    for hour in range(0, 23, 2):
        at = start + timedelta(hours=hour, minutes=5)
        for n, name in enumerate(names, start=1):
            held = min(8, (hour // 2 + n) % 9)
            jobs = [
                pod("ml-training", f"trainer-{n}-{hour:02d}-{j}", "main", GPU, gpu_id(n, j))
                for j in range(held)
            ]
            if n % 2 == 0 and hour >= 8:
                jobs.append(pod("crypto", f"tls-offload-{n}", "proxy", QAT, f"qat-{n}-0"))
            cluster.pods(name, jobs, at)
    # gpu-node-02: one GPU fails five hours ago.
    if nodes >= 2:
        failing = [device(gpu_id(2, i), 0 if i < 4 else 1) for i in range(8)]
        failing[3] = device(gpu_id(2, 3), 0, "Unhealthy")
        cluster.devices(names[1], GPU, failing, now - timedelta(hours=5))
    # gpu-node-03: a GPU disappears from the plugin's list two hours ago.
    if nodes >= 3:
        remaining = [device(gpu_id(3, i), 0 if i < 4 else 1) for i in range(7)]
        cluster.devices(names[2], GPU, remaining, now - timedelta(hours=2))
    # Everyone but the last node reports a moment ago; the last one went quiet 20 minutes ago.
    for n, name in enumerate(names, start=1):
        quiet = n == len(names)
        at = now - (timedelta(minutes=20) if quiet else timedelta(seconds=5))
        gpus = [device(gpu_id(n, i), 0 if i < 4 else 1) for i in range(8)]
        if n == 2:
            gpus[3] = device(gpu_id(2, 3), 0, "Unhealthy")
        if n == 3:
            gpus = gpus[:7]
        cluster.devices(name, GPU, gpus, at)
    with write_session(factory) as session:
        session.execute(
            update(Node)
            .where(Node.name == names[0])
            .values(
                capacity={"cpu": "96", "memory": "1056Gi", GPU: "8", "example.com/dongle": "4"},
                allocatable={"cpu": "95", "memory": "1040Gi", GPU: "8", "example.com/dongle": "4"},
                labels={
                    "kubernetes.io/hostname": names[0],
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    "topology.kubernetes.io/zone": "eu-west-1a",
                },
                kube_synced_at=now,
            )
        )
    return cluster
