"""The simulated API server through the real kubectl, and `devicedeck sim-apiserver` as a
command: discovery, get, patch (json, merge, strategic), label, watch, and its errors."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from devicedeck.sim.apiserver import SimApiServer

from .conftest import http, node_object, pod_object

KUBECTL = shutil.which("kubectl")
REPO = Path(__file__).resolve().parents[2]
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECACHEDIR": str(kubeconfig.parent / "kube-cache")},
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def patch_status(
    kubeconfig: Path, node: str, patch_type: str, patch: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return kubectl(
        kubeconfig,
        "patch",
        "node",
        node,
        "--subresource=status",
        f"--type={patch_type}",
        "-p",
        patch,
        check=check,
    )


SEED = '[{"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "4"}]'


def test_discovery_documents(api: SimApiServer) -> None:
    assert http(api, "GET", "/version")[1]["major"] == "1"
    assert http(api, "GET", "/api")[1]["versions"] == ["v1"]
    groups = {g["name"] for g in http(api, "GET", "/apis")[1]["groups"]}
    assert groups >= {"resource.k8s.io", "authentication.k8s.io", "coordination.k8s.io"}
    assert groups >= {"apps", "policy", "rbac.authorization.k8s.io", "authorization.k8s.io"}
    core = {r["name"]: r for r in http(api, "GET", "/api/v1")[1]["resources"]}
    assert core["nodes"]["kind"] == "Node" and not core["nodes"]["namespaced"]
    assert "patch" in core["nodes/status"]["verbs"]
    assert core["pods"]["namespaced"] and "watch" in core["pods"]["verbs"]
    dra = http(api, "GET", "/apis/resource.k8s.io/v1")[1]["resources"]
    assert {r["name"] for r in dra} >= {"resourceslices", "resourceclaims"}


@needs_kubectl
def test_kubectl_gets_and_patches_nodes(
    api: SimApiServer, kubeconfig: Path, core: k8s.CoreV1Api
) -> None:
    core.create_node(node_object("node-a"))
    listed = json.loads(kubectl(kubeconfig, "get", "nodes", "-o", "json").stdout)
    assert [n["metadata"]["name"] for n in listed["items"]] == ["node-a"]
    assert listed["items"][0]["status"]["capacity"]["cpu"] == "4"

    out = patch_status(kubeconfig, "node-a", "json", SEED)
    assert "patched" in out.stdout
    assert core.read_node("node-a").status.capacity["example.com/dongle"] == "4"

    patch_status(
        kubeconfig, "node-a", "merge", '{"status": {"allocatable": {"example.com/dongle": "3"}}}'
    )
    kubectl(kubeconfig, "label", "node", "node-a", "zone=a")
    node = core.read_node("node-a")
    assert node.status.allocatable["example.com/dongle"] == "3"
    assert node.metadata.labels["zone"] == "a"
    names = kubectl(kubeconfig, "get", "nodes", "-l", "zone=a", "-o", "name").stdout.split()
    assert names == ["node/node-a"]


@needs_kubectl
def test_kubectl_reports_the_servers_errors(kubeconfig: Path, core: k8s.CoreV1Api) -> None:
    core.create_node(node_object("node-a"))
    before = core.read_node("node-a").to_dict()
    missing = patch_status(kubeconfig, "ghost", "json", SEED, check=False)
    assert missing.returncode != 0
    assert 'nodes "ghost" not found' in missing.stderr
    remove = '[{"op": "remove", "path": "/status/capacity/example.com~1dongle"}]'
    bad = patch_status(kubeconfig, "node-a", "json", remove, check=False)
    assert bad.returncode != 0
    assert "invalid" in bad.stderr.lower()
    assert core.read_node("node-a").to_dict() == before


def _put_lines(stream: Any, lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line.strip())


@needs_kubectl
def test_kubectl_lists_and_watches_pods(kubeconfig: Path, core: k8s.CoreV1Api) -> None:
    core.create_namespaced_pod("ml", pod_object("ml", "train", "node-a"))
    core.create_namespaced_pod("web", pod_object("web", "serve", "node-b"))
    out = kubectl(
        kubeconfig, "get", "pods", "-A", "--field-selector", "spec.nodeName=node-a", "-o", "name"
    )
    assert out.stdout.split() == ["pod/train"]
    assert KUBECTL is not None
    watcher = subprocess.Popen(
        [
            KUBECTL,
            "--kubeconfig",
            str(kubeconfig),
            "get",
            "pods",
            "-n",
            "ml",
            "--watch-only",
            "-o",
            "name",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KUBECACHEDIR": str(kubeconfig.parent / "kube-cache")},
    )
    lines: queue.Queue[str] = queue.Queue()
    assert watcher.stdout is not None
    reader = threading.Thread(target=_put_lines, args=(watcher.stdout, lines))
    reader.start()
    try:
        # kubectl reports only what happens after its list, and a busy machine may start it
        # late: create a pod every few seconds until the watch reports one of them.
        deadline = time.monotonic() + 60
        created: list[str] = []
        seen = ""
        while time.monotonic() < deadline and not seen:
            name = f"later-{len(created)}"
            core.create_namespaced_pod("ml", pod_object("ml", name, "node-a"))
            created.append(f"pod/{name}")
            try:
                seen = lines.get(timeout=5)
            except queue.Empty:
                continue
        assert seen in created, (seen, created)
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)
        reader.join(timeout=10)
        if watcher.stdout:
            watcher.stdout.close()
        if watcher.stderr:
            watcher.stderr.close()


def test_the_command_serves_writes_a_kubeconfig_and_stops_on_sigterm(tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    kubeconfig = tmp_path / "out" / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devicedeck.cli",
            "sim-apiserver",
            "--port",
            "0",
            "--data-dir",
            str(data_dir),
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        # Waits for the outcome, however busy the machine; the suite's per-test timeout
        # ends a server that never writes its kubeconfig.
        while not kubeconfig.exists():
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            time.sleep(0.05)
        config = yaml.safe_load(kubeconfig.read_text())
        assert kubeconfig.stat().st_mode & 0o777 == 0o600
        server = config["clusters"][0]["cluster"]["server"]
        token = config["users"][0]["user"]["token"]
        request = urllib.request.Request(
            server + "/api/v1/nodes", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response)["kind"] == "NodeList"
        assert (data_dir / "state.json").exists()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        if process.stdout:
            process.stdout.close()


@needs_kubectl
def test_the_documented_curl_through_kubectl_proxy(kubeconfig: Path, core: k8s.CoreV1Api) -> None:
    """The Kubernetes documentation sends its patch through `kubectl proxy`; so can a user."""
    core.create_node(node_object("node-a"))
    assert KUBECTL is not None
    proxy = subprocess.Popen(
        [KUBECTL, "--kubeconfig", str(kubeconfig), "proxy", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proxy.stdout is not None
        line = proxy.stdout.readline()
        assert "Starting to serve on" in line, line
        address = line.rsplit(" ", 1)[1].strip()
        request = urllib.request.Request(
            f"http://{address}/api/v1/nodes/node-a/status",
            data=SEED.encode(),
            method="PATCH",
            headers={"Content-Type": "application/json-patch+json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response)["status"]["capacity"]["example.com/dongle"] == "4"
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
        if proxy.stdout:
            proxy.stdout.close()


# --- what operators run: get, describe, explain, auth, apply ----------------------------------


def columns(output: str) -> list[str]:
    """The header of kubectl's table, split where two or more spaces part the columns."""
    return [c.strip() for c in output.splitlines()[0].split("  ") if c.strip()]


def row(output: str, first: str) -> list[str]:
    """The cells of the row whose first cell is `first`, parted as the header is."""
    for line in output.splitlines()[1:]:
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{output}")


def full_node(name: str, *, cordoned: bool = False, ready: str = "True") -> dict[str, Any]:
    node = node_object(name)
    node["metadata"]["labels"]["node-role.kubernetes.io/gpu"] = ""
    node["spec"] = {"unschedulable": cordoned}
    node["status"]["conditions"] = [{"type": "Ready", "status": ready, "reason": "KubeletReady"}]
    node["status"]["addresses"] = [
        {"type": "InternalIP", "address": "10.0.0.7"},
        {"type": "Hostname", "address": name},
    ]
    node["status"]["nodeInfo"] = {
        "kubeletVersion": "v1.34.0",
        "osImage": "Debian GNU/Linux 12 (bookworm)",
        "kernelVersion": "6.1.0-18-amd64",
        "containerRuntimeVersion": "containerd://1.7.13",
    }
    return node


def create(api: SimApiServer, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    code, created = http(api, "POST", path, obj)
    assert code == 201, created
    result: dict[str, Any] = created
    return result


def running(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": {
            "phase": "Running",
            "podIP": "10.244.1.5",
            "podIPs": [{"ip": "10.244.1.5"}],
            "hostIP": "10.0.0.7",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                }
                for c in pod["spec"]["containers"]
            ],
        }
    }


@needs_kubectl
def test_get_nodes_prints_kubectls_columns_and_wide_ones(
    api: SimApiServer, kubeconfig: Path
) -> None:
    create(api, "/api/v1/nodes", full_node("gpu-a", cordoned=True))
    create(api, "/api/v1/nodes", full_node("gpu-b", ready="False"))
    out = kubectl(kubeconfig, "get", "nodes").stdout
    assert columns(out) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert row(out, "gpu-a")[1:3] == ["Ready,SchedulingDisabled", "gpu"]
    assert row(out, "gpu-a")[4] == "v1.34.0"
    assert row(out, "gpu-b")[1] == "NotReady"

    wide = kubectl(kubeconfig, "get", "nodes", "-o", "wide").stdout
    assert columns(wide) == [
        "NAME",
        "STATUS",
        "ROLES",
        "AGE",
        "VERSION",
        "INTERNAL-IP",
        "EXTERNAL-IP",
        "OS-IMAGE",
        "KERNEL-VERSION",
        "CONTAINER-RUNTIME",
    ]
    assert row(wide, "gpu-a")[5:] == [
        "10.0.0.7",
        "<none>",
        "Debian GNU/Linux 12 (bookworm)",
        "6.1.0-18-amd64",
        "containerd://1.7.13",
    ]


@needs_kubectl
def test_get_pods_prints_ready_status_and_wide_columns(
    api: SimApiServer, kubeconfig: Path, core: k8s.CoreV1Api
) -> None:
    train = pod_object("ml", "train", "gpu-a")
    core.create_namespaced_pod("ml", train)
    code, _ = http(
        api,
        "PATCH",
        "/api/v1/namespaces/ml/pods/train/status",
        running(train),
        "application/merge-patch+json",
    )
    assert code == 200
    core.create_namespaced_pod("web", pod_object("web", "waiting"))

    out = kubectl(kubeconfig, "get", "pods", "-A").stdout
    assert columns(out) == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert row(out, "ml")[1:5] == ["train", "1/1", "Running", "0"]
    assert row(out, "web")[1:5] == ["waiting", "0/1", "Pending", "0"]

    wide = kubectl(kubeconfig, "get", "pods", "-n", "ml", "-o", "wide").stdout
    assert columns(wide) == [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED NODE",
        "READINESS GATES",
    ]
    assert row(wide, "train")[5:] == ["10.244.1.5", "gpu-a", "<none>", "<none>"]
    # One object, and the name-only output that asks for no table, still work.
    assert row(kubectl(kubeconfig, "get", "pod", "train", "-n", "ml").stdout, "train")[2] == (
        "Running"
    )


@needs_kubectl
def test_get_namespaces_lists_the_system_ones_and_those_in_use(
    kubeconfig: Path, core: k8s.CoreV1Api
) -> None:
    core.create_namespaced_pod("ml", pod_object("ml", "train", "gpu-a"))
    out = kubectl(kubeconfig, "get", "namespaces").stdout
    assert columns(out) == ["NAME", "STATUS", "AGE"]
    for name in ("default", "kube-system", "kube-public", "kube-node-lease", "ml"):
        assert row(out, name)[1] == "Active"


def event(namespace: str, name: str, involved: dict[str, Any], reason: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name},
        "involvedObject": involved,
        "reason": reason,
        "message": f"{reason} happened",
        "type": "Warning" if reason.startswith("Failed") else "Normal",
        "source": {"component": "kubelet", "host": "gpu-a"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    }


@needs_kubectl
def test_get_events_across_namespaces(kubeconfig: Path, core: k8s.CoreV1Api) -> None:
    node = {"kind": "Node", "name": "gpu-a", "uid": "gpu-a"}
    pod = {"kind": "Pod", "namespace": "ml", "name": "train", "apiVersion": "v1"}
    core.create_namespaced_event("default", event("default", "gpu-a.1", node, "NodeReady"))
    core.create_namespaced_event("ml", event("ml", "train.1", pod, "FailedMount"))
    out = kubectl(kubeconfig, "get", "events", "-A").stdout
    assert columns(out) == ["NAMESPACE", "LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert row(out, "default")[2:] == ["Normal", "NodeReady", "node/gpu-a", "NodeReady happened"]
    assert row(out, "ml")[2:4] == ["Warning", "FailedMount"]
    assert "SOURCE" in columns(kubectl(kubeconfig, "get", "events", "-A", "-o", "wide").stdout)


@needs_kubectl
def test_describe_node_shows_its_lease_conditions_taints_and_events(
    api: SimApiServer, kubeconfig: Path, core: k8s.CoreV1Api
) -> None:
    created = create(api, "/api/v1/nodes", full_node("gpu-a", cordoned=True))
    create(
        api,
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
        {
            "metadata": {"name": "gpu-a"},
            "spec": {
                "holderIdentity": "gpu-a",
                "leaseDurationSeconds": 40,
                "renewTime": "2026-01-01T00:00:00.000000Z",
            },
        },
    )
    # The kubelet names its node by name in the uid field, controllers by the node's uid.
    by_name = {"kind": "Node", "name": "gpu-a", "uid": "gpu-a"}
    by_uid = {"kind": "Node", "name": "gpu-a", "uid": created["metadata"]["uid"]}
    other = {"kind": "Node", "name": "gpu-b", "uid": "gpu-b"}
    core.create_namespaced_event("default", event("default", "a.1", by_name, "NodeNotSchedulable"))
    core.create_namespaced_event("default", event("default", "a.2", by_uid, "RegisteredNode"))
    core.create_namespaced_event("default", event("default", "b.1", other, "Rebooted"))

    result = kubectl(kubeconfig, "describe", "node", "gpu-a")
    assert result.stderr == ""
    out = result.stdout
    assert "HolderIdentity:  gpu-a" in out
    assert "Taints:             node.kubernetes.io/unschedulable:NoSchedule" in out
    assert "Unschedulable:      true" in out
    assert "InternalIP:  10.0.0.7" in out
    events = out.split("Events:", 1)[1]
    assert "NodeNotSchedulable" in events and "RegisteredNode" in events
    assert "Rebooted" not in events


@needs_kubectl
def test_explain_node_and_its_fields(kubeconfig: Path) -> None:
    out = kubectl(kubeconfig, "explain", "node").stdout
    assert out.startswith("KIND:       Node\nVERSION:    v1\n")
    assert "DESCRIPTION:" in out
    assert "spec\t<NodeSpec>" in out and "status\t<NodeStatus>" in out
    field = kubectl(kubeconfig, "explain", "node.spec.unschedulable").stdout
    assert "FIELD: unschedulable <boolean>" in field
    assert "cordon" in field
    taints = kubectl(kubeconfig, "explain", "nodes.spec.taints").stdout
    assert "FIELD: taints <[]Taint>" in taints and "effect\t<string> -required-" in taints
    deployment = kubectl(kubeconfig, "explain", "deployment.spec.template.spec.containers").stdout
    assert "GROUP:      apps" in deployment and "resources\t<ResourceRequirements>" in deployment
    # The OpenAPI v2 document, which client-go reads in protobuf.
    legacy = kubectl(kubeconfig, "explain", "node.spec", "--output", "plaintext-openapiv2")
    assert legacy.stdout.startswith("KIND:     Node\nVERSION:  v1\n")
    assert "unschedulable\t<boolean>" in legacy.stdout


@needs_kubectl
def test_auth_can_i_and_whoami(kubeconfig: Path) -> None:
    assert kubectl(kubeconfig, "auth", "can-i", "patch", "nodes/status").stdout.strip() == "yes"
    assert kubectl(kubeconfig, "auth", "can-i", "list", "pods", "-A").stdout.strip() == "yes"
    rules = kubectl(kubeconfig, "auth", "can-i", "--list").stdout
    assert row(rules, "*.*")[-1] == "[*]"
    assert row(kubectl(kubeconfig, "auth", "whoami").stdout, "Username")[1] == "admin"


def manifests() -> list[tuple[str, str]]:
    """(kind, name) of every object `kubectl kustomize deploy/kubernetes` renders."""
    rendered = subprocess.run(
        [KUBECTL or "kubectl", "kustomize", str(REPO / "deploy" / "kubernetes")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(rendered) if d]


@needs_kubectl
def test_apply_the_projects_manifests_with_a_server_dry_run_stores_nothing(
    api: SimApiServer, kubeconfig: Path
) -> None:
    before = json.dumps(api.store.objects, sort_keys=True)
    result = kubectl(
        kubeconfig, "apply", "-k", str(REPO / "deploy" / "kubernetes"), "--dry-run=server"
    )
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == len(manifests())
    assert all(line.endswith("created (server dry run)") for line in lines), lines
    assert json.dumps(api.store.objects, sort_keys=True) == before


@needs_kubectl
def test_apply_stores_the_manifests_and_delete_takes_them_away(
    api: SimApiServer, kubeconfig: Path
) -> None:
    directory = str(REPO / "deploy" / "kubernetes")
    kubectl(kubeconfig, "apply", "-k", directory)
    listed = kubectl(kubeconfig, "get", "deployments,daemonsets", "-A", "-o", "name").stdout
    assert listed.split() == ["deployment.apps/devicedeck", "daemonset.apps/devicedeck-agent"]
    again = kubectl(kubeconfig, "apply", "-k", directory)
    assert again.stderr == ""
    assert "deployment.apps/devicedeck unchanged" in again.stdout

    kubectl(kubeconfig, "delete", "-k", directory)
    names = kubectl(kubeconfig, "get", "namespaces", "-o", "name").stdout.split()
    assert "namespace/devicedeck" not in names
    assert kubectl(kubeconfig, "get", "serviceaccounts", "-A", "-o", "name").stdout == ""


@needs_kubectl
def test_apply_refuses_a_field_the_kind_lacks_and_stores_nothing(
    api: SimApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    manifest = tmp_path / "typo.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: ml\n"
        "  lables:\n    app: x\ndata:\n  a: b\n"
    )
    before = json.dumps(api.store.objects, sort_keys=True)
    result = kubectl(kubeconfig, "apply", "-f", str(manifest), check=False)
    assert result.returncode != 0
    assert 'strict decoding error: unknown field "metadata.lables"' in result.stderr
    assert json.dumps(api.store.objects, sort_keys=True) == before


@needs_kubectl
def test_cordon_and_uncordon(api: SimApiServer, kubeconfig: Path) -> None:
    create(api, "/api/v1/nodes", full_node("gpu-a"))
    assert "cordoned" in kubectl(kubeconfig, "cordon", "gpu-a").stdout
    node = http(api, "GET", "/api/v1/nodes/gpu-a")[1]
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    ]
    assert row(kubectl(kubeconfig, "get", "nodes").stdout, "gpu-a")[1] == (
        "Ready,SchedulingDisabled"
    )
    kubectl(kubeconfig, "uncordon", "gpu-a")
    node = http(api, "GET", "/api/v1/nodes/gpu-a")[1]
    assert not node["spec"].get("unschedulable") and "taints" not in node["spec"]
