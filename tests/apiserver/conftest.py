"""Fixtures for the simulated API server: one per test, its kubeconfig, the official client."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from devicedeck.sim.apiserver import SimApiServer


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "cluster"
    path.mkdir()
    return path


@pytest.fixture
def api(data_dir: Path) -> Iterator[SimApiServer]:
    server = SimApiServer(data_dir).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubeconfig(api: SimApiServer, tmp_path: Path) -> Path:
    return api.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api_client(kubeconfig: Path) -> Iterator[k8s.ApiClient]:
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration, persist_config=False
    )
    with k8s.ApiClient(configuration) as client:
        yield client


@pytest.fixture
def core(api_client: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api_client)


def http(
    api: SimApiServer,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
    token: str | None = "admin",
) -> tuple[int, Any]:
    """A plain HTTP request, as curl sends it; (status code, decoded JSON body)."""
    headers = {"Content-Type": content_type}
    if token is not None:
        headers["Authorization"] = f"Bearer {api.store.admin_token if token == 'admin' else token}"
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    request = urllib.request.Request(api.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.load(e)


def node_object(name: str, capacity: dict[str, str] | None = None) -> dict[str, Any]:
    capacity = {"cpu": "4", "memory": "8Gi", **(capacity or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def pod_object(namespace: str, name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "trainer:1",
                "resources": {
                    "requests": {"example.com/gpu": "1"},
                    "limits": {"example.com/gpu": "1"},
                },
            }
        ]
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
