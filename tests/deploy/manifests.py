"""The Kubernetes objects under deploy/: the base in deploy/kubernetes, its optional
components, and deploy/monitoring; read from the files, each with the file it came from."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helpers import REPO

MANIFESTS = REPO / "deploy" / "kubernetes"
COMPONENTS = MANIFESTS / "components"
MONITORING = REPO / "deploy" / "monitoring"
KUSTOMIZATION = "kustomization.yaml"
# Not Kubernetes objects: the alert rules as a plain rule file, and promtool's unit tests.
NOT_OBJECTS = {"devicedeck.rules.yaml", "rules-test.yaml"}
SERVER_NAMESPACE = "devicedeck"
AGENT_NAMESPACE = "devicedeck-agent"

Obj = dict[str, Any]


def manifest_files(directory: Path) -> list[Path]:
    return sorted(
        p for p in directory.glob("*.yaml") if p.name != KUSTOMIZATION and p.name not in NOT_OBJECTS
    )


def load(paths: list[Path]) -> list[tuple[str, Obj]]:
    objects = []
    for path in paths:
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                objects.append((str(path.relative_to(REPO)), document))
    return objects


COMPONENT_DIRS = sorted(p for p in COMPONENTS.iterdir() if (p / KUSTOMIZATION).exists())
BASE = load(manifest_files(MANIFESTS))
EVERYTHING = load(
    [
        *manifest_files(MANIFESTS),
        *(f for d in COMPONENT_DIRS for f in manifest_files(d)),
        *manifest_files(MONITORING),
    ]
)


def find(kind: str, name: str | None = None, objects: list[tuple[str, Obj]] = EVERYTHING) -> Obj:
    matches = [o for _, o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def pod_spec(obj: Obj) -> Obj:
    spec: Obj = obj["spec"]["template"]["spec"]
    return spec


def pod_labels(obj: Obj) -> dict[str, str]:
    labels: dict[str, str] = obj["spec"]["template"]["metadata"]["labels"]
    return labels


def containers(obj: Obj) -> list[Obj]:
    template = obj.get("spec", {}).get("template")
    if template is None:
        return []
    spec = template["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def kustomize(directory: Path) -> list[Obj]:
    """Render a kustomization with `kubectl kustomize`, as `kubectl apply -k` would."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (Debian: apt-get install kubectl)")
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def overlay(tmp: Path, components: list[Path]) -> Path:
    """An overlay in `tmp` of the base with the given components, as an operator writes it.
    Kustomize takes only relative paths to other kustomizations."""
    lines = ["resources:", f"  - {os.path.relpath(MANIFESTS, tmp)}"]
    if components:
        lines.append("components:")
        lines += [f"  - {os.path.relpath(c, tmp)}" for c in components]
    (tmp / KUSTOMIZATION).write_text("\n".join(lines) + "\n")
    return tmp
