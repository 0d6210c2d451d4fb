"""The agent's pod-resources mount is read-only (deploy/kubernetes/agent.yaml): the kubelet's
PodResources API must still answer through it. A read-only bind mount of a simulated kubelet's
pod-resources directory, made in a private mount namespace as the kubelet's hostPath volume
would be, is used by the agent's own PodResources client."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicedeck.kubelet.paths import POD_RESOURCES_SOCKET_NAME, pod_resources_dir
from devicedeck.sim.kubelet import ContainerSpec, SimKubelet

# Runs inside the mount namespace, against the read-only mount in argv[1].
CLIENT = """
import json, sys
from pathlib import Path
from devicedeck.kubelet.podresources import PodResourcesClient

mount = Path(sys.argv[1])
try:
    (mount / "probe").write_text("x")
    writable = True
except OSError:
    writable = False
with PodResourcesClient(mount / sys.argv[2]) as client:
    pods = client.list_pod_resources().pod_resources
print(json.dumps({"writable": writable, "pods": [[p.namespace, p.name] for p in pods]}))
"""


def mount_namespaces_available() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = subprocess.run([unshare, "-m", "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.fixture
def kubelet_root() -> Iterator[Path]:
    """A simulated kubelet's root; short, for unix socket paths."""
    root = Path(tempfile.mkdtemp(prefix="dd", dir="/tmp"))
    kubelet = SimKubelet(root)
    kubelet.start()
    try:
        kubelet.create_pod("ml", "train", [ContainerSpec("main")])
        yield root
    finally:
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(
    not mount_namespaces_available(), reason="needs mount namespaces (unshare -m, as root)"
)
def test_pod_resources_answers_through_a_read_only_mount(kubelet_root: Path) -> None:
    mount = Path(tempfile.mkdtemp(prefix="ddro", dir="/tmp"))
    try:
        script = (
            'mount --bind "$1" "$2" && mount -o remount,ro,bind "$2" && exec "$3" -c "$4" "$2" "$5"'
        )
        result = subprocess.run(
            [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
                str(pod_resources_dir(kubelet_root)),
                str(mount),
                sys.executable,
                CLIENT,
                POD_RESOURCES_SOCKET_NAME,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        answer = json.loads(result.stdout)
    finally:
        shutil.rmtree(mount, ignore_errors=True)
    assert answer["writable"] is False, "the mount was not read-only"
    assert answer["pods"] == [["ml", "train"]]
    # Nothing was written through the mount into the kubelet's directory.
    assert not (pod_resources_dir(kubelet_root) / "probe").exists()
