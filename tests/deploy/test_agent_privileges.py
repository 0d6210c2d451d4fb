"""Why the agent runs as uid 0 with every capability dropped (deploy/kubernetes/agent.yaml):
the kubelet creates its pod-resources directory (0750) and socket (0755, under its umask)
owned by root, and connect() on a unix socket needs write permission on it. Shown with real
processes against a simulated kubelet laid out the same way: root without a single
capability is answered, by ownership alone; any other user is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicedeck.kubelet.paths import POD_RESOURCES_SOCKET_NAME, pod_resources_dir
from devicedeck.sim.kubelet import ContainerSpec, SimKubelet

from .manifests import find

# connect() as whoever runs it, then one PodResources List: the pods, or why not.
CLIENT = """
import json, socket, sys
from devicedeck.kubelet.podresources import PodResourcesClient

probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    probe.connect(sys.argv[1])
except OSError as e:
    print(json.dumps({"error": e.strerror}))
    sys.exit(0)
finally:
    probe.close()
with PodResourcesClient(sys.argv[1]) as client:
    pods = client.list_pod_resources().pod_resources
print(json.dumps({"pods": [[p.namespace, p.name] for p in pods]}))
"""
NOBODY = 65534

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv (util-linux) to run a client as another user",
)


@pytest.fixture
def kubelet_root() -> Iterator[Path]:
    """A simulated kubelet's root, its pod-resources directory and socket as the kubelet
    makes them; the directories above it open to all, so only the kubelet's modes decide."""
    root = Path(tempfile.mkdtemp(prefix="dd", dir="/tmp"))
    root.chmod(0o755)
    kubelet = SimKubelet(root)
    kubelet.start()
    try:
        kubelet.create_pod("ml", "train", [ContainerSpec("main")])
        directory = pod_resources_dir(root)
        directory.chmod(0o750)
        (directory / POD_RESOURCES_SOCKET_NAME).chmod(0o755)
        yield root
    finally:
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


def list_as(kubelet_root: Path, *identity: str) -> dict[str, object]:
    socket = pod_resources_dir(kubelet_root) / POD_RESOURCES_SOCKET_NAME
    done = subprocess.run(
        ["setpriv", *identity, sys.executable, "-c", CLIENT, str(socket)],
        capture_output=True,
        text=True,
        timeout=120,
        # The client's own imports must be readable by the other user: its code and its
        # virtualenv are, only the kubelet's directory is not.
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_root_with_every_capability_dropped_is_answered(kubelet_root: Path) -> None:
    answer = list_as(
        kubelet_root,
        "--reuid=0",
        "--regid=0",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    )
    assert answer == {"pods": [["ml", "train"]]}


def test_any_other_user_is_refused(kubelet_root: Path) -> None:
    for groups in (["--clear-groups"], ["--groups=0"]):  # not even in root's group
        answer = list_as(kubelet_root, f"--reuid={NOBODY}", f"--regid={NOBODY}", *groups)
        assert "Permission denied" in str(answer.get("error")), answer


def test_the_daemonset_runs_the_agent_as_that_root() -> None:
    """uid 0, no capability at all, no escalation, a read-only root filesystem, the
    runtime's seccomp profile: what the tests above show is enough."""
    pod = find("DaemonSet", "devicedeck-agent")["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    context = agent["securityContext"]
    assert (context["runAsUser"], context["runAsNonRoot"]) == (0, False)
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod)
