"""The simulated API server through the real kubectl, and `devicedeck sim-apiserver` as a
command: discovery, get, patch (json, merge, strategic), label, watch, and its errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from devicedeck.sim.apiserver import SimApiServer

from .conftest import http, node_object, pod_object

KUBECTL = shutil.which("kubectl")
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
    assert groups == {"resource.k8s.io", "authentication.k8s.io", "coordination.k8s.io"}
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
    try:
        # The watch is open once kubectl has listed; create until it reports the pod.
        deadline = time.monotonic() + 30
        line = ""
        assert watcher.stdout is not None
        time.sleep(1.0)
        core.create_namespaced_pod("ml", pod_object("ml", "later", "node-a"))
        while time.monotonic() < deadline and not line:
            line = watcher.stdout.readline().strip()
        assert line == "pod/later"
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)
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
