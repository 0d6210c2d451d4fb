"""Simulated pods and the small state file that keeps their names across restarts.

A real kubelet learns pod names, namespaces and container specs from the API server and
only checkpoints the device assignment (keyed by pod UID). The simulated kubelet has no API
server, so it keeps ``<root>/devicedeck-sim/pods.json`` itself, written atomically like the
checkpoint. The file lives outside ``device-plugins/`` so that directory looks exactly like
a real kubelet's.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devicedeck.kubelet.names import (
    dns1123_label_problem,
    extended_resource_name_problem,
    pod_name_problem,
)

log = logging.getLogger(__name__)

POD_STATE_VERSION = 1


class PodSpecError(ValueError):
    """A pod description breaks a naming or request rule."""


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    # Extended resource name -> device count (requests equal limits for extended resources).
    requests: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "requests": dict(sorted(self.requests.items()))}


@dataclass(frozen=True)
class Pod:
    uid: str
    namespace: str
    name: str
    containers: tuple[ContainerSpec, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "containers": [c.to_json() for c in self.containers],
        }


def container_spec_from_json(raw: Any) -> ContainerSpec:
    """Parse and validate one container description ({"name": ..., "requests": {...}})."""
    if not isinstance(raw, dict):
        raise PodSpecError("each container must be an object with 'name' and 'requests'")
    name = raw.get("name")
    if not isinstance(name, str):
        raise PodSpecError("container 'name' must be a string")
    problem = dns1123_label_problem(name)
    if problem:
        raise PodSpecError(f"container name {name!r} {problem}")
    requests_raw = raw.get("requests", {})
    if not isinstance(requests_raw, dict):
        raise PodSpecError(f"container {name}: 'requests' must be an object of RESOURCE: COUNT")
    requests: dict[str, int] = {}
    for resource, count in requests_raw.items():
        problem = extended_resource_name_problem(str(resource))
        if problem:
            raise PodSpecError(f"container {name}: resource name {resource!r} {problem}")
        # bool is an int subclass in Python; a JSON true is not a device count.
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise PodSpecError(
                f"container {name}: request for {resource} must be a whole number of "
                f"devices of at least 1, got {count!r}"
            )
        requests[str(resource)] = count
    return ContainerSpec(name=name, requests=requests)


def validate_pod_identity(namespace: str, name: str) -> None:
    problem = dns1123_label_problem(namespace)
    if problem:
        raise PodSpecError(f"namespace {namespace!r} {problem}")
    problem = pod_name_problem(name)
    if problem:
        raise PodSpecError(f"pod name {name!r} {problem}")


def validate_containers(containers: tuple[ContainerSpec, ...]) -> None:
    if not containers:
        raise PodSpecError("a pod needs at least one container")
    names = [c.name for c in containers]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PodSpecError(f"container names must be unique within a pod: {duplicates}")


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a dot-prefixed temp file in the same directory, fsync, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as tmp:
            tmp.write(text)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


class PodStore:
    """The active pods, by UID, mirrored to a JSON state file after every change."""

    def __init__(self, state_path: Path) -> None:
        self._path = state_path
        self._lock = threading.Lock()
        self._pods: dict[str, Pod] = {}

    @property
    def path(self) -> Path:
        return self._path

    def load(self) -> list[Pod]:
        """Read the state file left by a previous run; a missing file means no pods."""
        try:
            raw = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            # A damaged state file must not stop the kubelet; pods are simply forgotten.
            log.warning("pod state unreadable", extra={"path": self._path, "error": e})
            return []
        pods: list[Pod] = []
        for entry in raw.get("pods", []) if isinstance(raw, dict) else []:
            try:
                containers = tuple(container_spec_from_json(c) for c in entry["containers"])
                pod = Pod(
                    uid=str(entry["uid"]),
                    namespace=str(entry["namespace"]),
                    name=str(entry["name"]),
                    containers=containers,
                )
            except (KeyError, TypeError, PodSpecError) as e:
                log.warning("pod state entry skipped", extra={"path": self._path, "error": e})
                continue
            pods.append(pod)
        with self._lock:
            self._pods = {p.uid: p for p in pods}
        return pods

    def active(self) -> list[Pod]:
        with self._lock:
            return sorted(self._pods.values(), key=lambda p: (p.namespace, p.name))

    def active_uids(self) -> set[str]:
        with self._lock:
            return set(self._pods)

    def find(self, namespace: str, name: str) -> Pod | None:
        with self._lock:
            for pod in self._pods.values():
                if pod.namespace == namespace and pod.name == name:
                    return pod
        return None

    def add(self, pod: Pod) -> None:
        with self._lock:
            self._pods[pod.uid] = pod
            self._save_locked()

    def remove(self, uid: str) -> Pod | None:
        with self._lock:
            pod = self._pods.pop(uid, None)
            if pod is not None:
                self._save_locked()
            return pod

    def _save_locked(self) -> None:
        document = {
            "version": POD_STATE_VERSION,
            "pods": [p.to_json() for p in sorted(self._pods.values(), key=lambda p: p.uid)],
        }
        atomic_write_text(self._path, json.dumps(document, indent=1, sort_keys=True) + "\n")
